"""The clock of the node that leads the shards jumps, for real: the worker
process runs under libfaketime (Debian's ``faketime``, which ``make os-deps``
installs), two hours ahead, then two hours behind, while the database's
clock is right.

Planning from that clock would, with a two-hour jump ahead, count two hours
of a minutely cron's slots as missed (SKIP drops them for good) and bring far
jobs due in more than an hour into the hot table. A third leader is three days
ahead with a two-day retention: a history janitor that took "today" from it
would drop today's partition, which the live completions write into. Each
leader also fires jobs due now: held until their run_at by a clock two hours
behind, they lost their leases unfired and FAILED.
Invariants: the materializer refuses every pass across the jump and counts it
(``vakit_cron_clock_skew_refusals_total``), the mover plans from the
database's clock, the janitor drops no day the completions write into (its
"today" is the database's) and no finished job is lost, every job due now
succeeds at its first attempt, fired once (the worker holds jobs by the
shards' clock: ``cluster.clock.AnchoredClock``), and once the
leader's clock is right the cron's next slot is materialized, once, with
nothing missed. The time from the fix to the slot's occurrence is printed.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

import shardmap
from cluster.model import CreateJobParams
from tests.faults.test_worker_faults import finished, history, text_id
from tests.helpers import wait_for
from tests.procs import TOKEN, FaultSink, ProcessHarness, VakitProcess
from tests.shards import create_jobs, job_on, rows

pytestmark = pytest.mark.faults

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
SKEW = "vakit_cron_clock_skew_refusals_total"
CRON_STATE = "SELECT next_fire_at, missed_count, skipped_count FROM cron_jobs"
LAST_PASS = "vakit_maintenance_last_success_timestamp_seconds"
PARTITIONS = "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE 'job_history_p%%'"


def jumped_worker(procs: ProcessHarness, name: str, offset: str) -> VakitProcess:
    """A worker whose wall clock is ``offset`` (``+2h``, ``-2h``) off; its
    monotonic clock is left alone, as a wall-clock step leaves it."""
    if not LIBFAKETIME.exists():
        pytest.fail(f"{LIBFAKETIME} is missing: `make os-deps` installs Debian's faketime")
    worker = procs.worker(name, start=False)
    worker.env.update(
        LD_PRELOAD=str(LIBFAKETIME), FAKETIME=offset, FAKETIME_DONT_FAKE_MONOTONIC="1"
    )
    return worker.start()


def test_a_leader_whose_clock_jumps_plans_nothing_from_it(
    procs: ProcessHarness, sink: FaultSink
) -> None:
    dsns = procs.shards
    procs.settings.update({"materializer_interval": "0.5", "history_retention_days": "2"})
    api = procs.api()
    api.wait_ready()
    with httpx.Client(
        base_url=api.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    ) as client:
        resp = client.post(
            "/api/v1/cron-jobs",
            json={
                "name": "every-minute",
                "schedule": "* * * * *",
                "timeZone": "UTC",
                "target": {"kind": "HTTP", "url": sink.url},
                "misfirePolicy": "SKIP",
            },
        )
        assert resp.status_code == 201, resp.text
    cron_id = shardmap.decode_id("cron", resp.json()["cronJobId"])
    [(first_slot,)] = rows(dsns, "SELECT next_fire_at FROM cron_jobs")
    # Due in two and a half hours: beyond the mover's one-hour horizon by the
    # database's clock, within it by a clock two hours ahead.
    later = job_on(
        shardmap.ShardMap(len(dsns)),
        0,
        sink.url,
        run_at=datetime.now(UTC) + timedelta(hours=2.5),
        far=True,
    )
    create_jobs(dsns, [later])
    partitions = {r[0] for r in rows(dsns, PARTITIONS)}
    done: list[CreateJobParams] = []

    for name, offset in (("ahead", "+2h"), ("behind", "-2h"), ("days-ahead", "+3d")):
        worker = jumped_worker(procs, f"worker-{name}", offset)
        worker.wait_ready()
        # Jobs due now on every shard: fired at once, by the shards' clock
        # (held by a clock behind, they would lose their leases unfired).
        due = [job_on(shardmap.ShardMap(len(dsns)), s, sink.url) for s in range(len(dsns))]
        create_jobs(dsns, due)
        done += due

        def ran(due: list[CreateJobParams] = due) -> bool:
            return finished(dsns, due) == len(due)

        wait_for(ran, timeout=30, what=f"{name}: the jobs due now")
        if name == "days-ahead":

            def janitor_ran(worker: VakitProcess = worker) -> bool:
                return all(
                    worker.metric(LAST_PASS, loop="janitor", shard=str(s)) > 0
                    for s in range(len(dsns))
                )

            # Its janitor's "today" is the database's: no day dropped that
            # the completions write into, every finished job's history kept.
            wait_for(janitor_ran, timeout=30, what="a janitor pass on every shard")
            assert partitions <= {r[0] for r in rows(dsns, PARTITIONS)}
        assert history(dsns, done) == {text_id(p): [("SUCCEEDED", 1)] for p in done}
        assert {text_id(p): len(sink.by_job()[text_id(p)]) for p in due} == {
            text_id(p): 1 for p in due
        }

        def planned_or_refused(worker: VakitProcess = worker) -> bool:
            # Three refused passes, or a pass that planned from the jumped clock.
            return worker.metric(SKEW) >= 3 or rows(dsns, CRON_STATE) != [(first_slot, 0, 0)]

        wait_for(planned_or_refused, timeout=30, what=f"{name}: materializer passes")
        assert rows(dsns, "SELECT count(*) FROM cron_occurrences") == [(0,)] * len(dsns)
        assert rows(dsns, CRON_STATE) == [(first_slot, 0, 0)]
        assert worker.metric(SKEW) >= 3
        assert rows(dsns, "SELECT id FROM jobs_far") == [(later.id,)]
        refusals = worker.metric(SKEW)
        worker.sigkill()

    fixed = time.monotonic()
    worker = procs.worker("worker-right")
    wait_for(
        lambda: (
            rows(
                dsns, "SELECT count(*) FROM cron_occurrences WHERE cron_id = %(c)s", {"c": cron_id}
            )
            != [(0,)] * len(dsns)
        ),
        timeout=30,
        what="the next slot's occurrence",
    )
    back = time.monotonic() - fixed
    occurrences = rows(dsns, "SELECT scheduled_for FROM cron_occurrences ORDER BY scheduled_for")
    assert occurrences[0] == (first_slot,)
    [(missed, skipped)] = rows(dsns, "SELECT missed_count, skipped_count FROM cron_jobs")
    assert (missed, skipped) == (0, 0)
    assert rows(dsns, "SELECT id FROM jobs_far") == [(later.id,)]
    assert worker.alive()
    print(
        f"\nclock jump: the leader refused to plan {refusals:.0f}+ passes two hours off; "
        f"with its clock right, slot {first_slot.astimezone(UTC):%H:%M} UTC was materialized {back:.2f} s later"
    )
