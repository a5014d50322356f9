"""Worker and shard faults, injected for real into real processes.

Each test starts ``vakit worker`` / ``vakit api`` processes against real
PostgreSQL shards and a real HTTP target (:class:`tests.procs.FaultSink`),
injects one fault (SIGKILL, SIGSTOP/SIGCONT, SIGTERM, a shard stopped and
started or made read-only, a wave of 10,000 due jobs) and then checks the
invariants in the databases themselves: no job lost, none completed twice,
every stale write fenced (DESIGN.md, invariants 1-4 and 8).
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

import shardmap
from cluster.local.pgserver import PgServer
from cluster.model import CreateJobParams
from tests.helpers import wait_for
from tests.pgfixtures import SHARDS
from tests.procs import OWNER, TOKEN, FaultSink, ProcessHarness
from tests.shards import api_body, create_jobs, job_on, rows

pytestmark = pytest.mark.faults

SHARD_MAP = shardmap.ShardMap(SHARDS)
FENCED = "vakit_fenced_writes_total"
SUCCEEDED = "vakit_jobs_succeeded_total"
# Long enough that only a fault ends the first attempt; the sink cuts its
# sleeps short when it closes.
HANG = 600


# -- jobs and database checks -------------------------------------------------------


def text_id(p: CreateJobParams) -> str:
    return shardmap.encode_id("job", p.id)


def total(dsns: list[str], query: str, params: dict[str, Any] | None = None) -> int:
    return sum(int(r[0]) for r in rows(dsns, query, params))


def tally(dsns: list[str], query: str) -> Counter[str]:
    """A ``SELECT key, count(*) … GROUP BY key`` summed over the shards."""
    out: Counter[str] = Counter()
    for key, count in rows(dsns, query):
        out[key] += count
    return out


def history(dsns: list[str], jobs: list[CreateJobParams]) -> dict[str, list[tuple[str, int]]]:
    """Every history row (status, attempt) of each job."""
    found = rows(
        dsns,
        "SELECT id, status, attempt FROM job_history WHERE id = ANY(%(ids)s) ORDER BY finished_at",
        {"ids": [p.id for p in jobs]},
    )
    out: dict[str, list[tuple[str, int]]] = {text_id(p): [] for p in jobs}
    for job_id, status, attempt in found:
        out[shardmap.encode_id("job", job_id)].append((status, attempt))
    return out


def attempt_log(dsns: list[str], p: CreateJobParams) -> list[tuple[int, str, str]]:
    return [
        (a, o, w)
        for a, o, w in rows(
            dsns,
            "SELECT attempt, outcome, worker FROM job_attempts WHERE job_id = %(id)s "
            "ORDER BY attempt, finished_at",
            {"id": p.id},
        )
    ]


def finished(dsns: list[str], jobs: list[CreateJobParams]) -> int:
    return total(
        dsns,
        "SELECT count(*) FROM job_history WHERE id = ANY(%(ids)s)",
        {"ids": [p.id for p in jobs]},
    )


def hot_rows(dsns: list[str]) -> list[tuple[Any, ...]]:
    return rows(dsns, "SELECT id, status, attempt, max_attempts, locked_by FROM jobs ORDER BY id")


def running(dsns: list[str], jobs: list[CreateJobParams]) -> list[tuple[Any, ...]]:
    """The ids of ``jobs`` a worker holds (claimed, RUNNING)."""
    return rows(
        dsns,
        "SELECT id FROM jobs WHERE id = ANY(%(ids)s) AND status = 'RUNNING'",
        {"ids": [p.id for p in jobs]},
    )


# -- 1. SIGKILL ------------------------------------------------------------------------


def assert_rerun_by_worker_b(
    dsns: list[str], jobs: list[CreateJobParams], sink: FaultSink, first_answer: int | None
) -> None:
    """worker-a's attempt 1 expired (the target answered ``first_answer``,
    None if it never did); worker-b ran attempt 2 and only that one counted:
    nothing left in the hot table, each job SUCCEEDED once."""
    assert hot_rows(dsns) == []
    firings = sink.by_job()
    for p in jobs:
        assert history(dsns, [p])[text_id(p)] == [("SUCCEEDED", 2)]
        assert attempt_log(dsns, p) == [
            (1, "LEASE_EXPIRED", "worker-a"),
            (2, "SUCCEEDED", "worker-b"),
        ]
        assert [(f.attempt, f.status) for f in firings[text_id(p)]] == [(1, first_answer), (2, 200)]


def test_killed_workers_jobs_run_again_elsewhere_after_the_lease(
    procs: ProcessHarness, sink: FaultSink, shard_dsns: list[str]
) -> None:
    a = procs.worker("worker-a").wait_ready()
    jobs = [
        job_on(SHARD_MAP, i % SHARDS, sink.url, payload={"sleep_first": HANG}, timeout=3600) for i in range(6)
    ]
    ids = {text_id(p) for p in jobs}
    create_jobs(shard_dsns, jobs)
    wait_for(lambda: ids <= sink.job_ids(attempt=1), timeout=20, what="worker-a firing every job")
    held = hot_rows(shard_dsns)
    assert sorted((status, attempt, by) for _, status, attempt, _, by in held) == [
        ("RUNNING", 1, "worker-a")
    ] * len(jobs)

    b = procs.worker("worker-b").wait_ready()
    a.sigkill()
    wait_for(
        lambda: finished(shard_dsns, jobs) == len(jobs), timeout=60, what="every job to finish"
    )

    assert_rerun_by_worker_b(shard_dsns, jobs, sink, first_answer=None)  # killed mid-firing
    assert b.metric(SUCCEEDED) == len(jobs)
    assert b.metric(FENCED) == 0


def test_killed_worker_with_unwritten_outcomes_loses_none(
    procs: ProcessHarness, sink: FaultSink, shard_dsns: list[str]
) -> None:
    # worker-a fires, the target answers 200, and worker-a is SIGKILLed while
    # the outcomes still wait in its completer (a long linger): nothing wrote
    # them, so after the lease worker-b runs each job again (at least once),
    # and only attempt 2 is recorded, once.
    a = procs.worker("worker-a", complete_linger=60).wait_ready()
    jobs = [job_on(SHARD_MAP, i % SHARDS, sink.url, timeout=3600) for i in range(6)]
    ids = {text_id(p) for p in jobs}
    create_jobs(shard_dsns, jobs)
    wait_for(
        lambda: all(
            [f.status for f in sink.by_job().get(i, [])] == [200] for i in ids
        ),
        timeout=20,
        what="the target answering worker-a for every job",
    )
    assert a.metric(SUCCEEDED) == 0  # the test's premise: no outcome written yet
    assert sorted((status, attempt, by) for _, status, attempt, _, by in hot_rows(shard_dsns)) == [
        ("RUNNING", 1, "worker-a")
    ] * len(jobs)

    b = procs.worker("worker-b").wait_ready()
    a.sigkill()
    wait_for(lambda: finished(shard_dsns, jobs) == len(jobs), timeout=60, what="every job to finish")

    assert_rerun_by_worker_b(shard_dsns, jobs, sink, first_answer=200)
    assert b.metric(SUCCEEDED) == len(jobs) and b.metric(FENCED) == 0


def test_killed_worker_loses_none_of_its_preloaded_jobs(
    procs: ProcessHarness, sink: FaultSink, shard_dsns: list[str]
) -> None:
    # worker-a preloads jobs due in a few seconds (claimed, held in its timing
    # wheel, not fired yet) and is SIGKILLed before their moment: the leases
    # run out after run_at and worker-b fires each of them, once.
    a = procs.worker("worker-a", prefetch_seconds=30).wait_ready()
    due = datetime.now(UTC) + timedelta(seconds=4)
    jobs = [job_on(SHARD_MAP, i % SHARDS, sink.url, run_at=due, timeout=2) for i in range(8)]
    create_jobs(shard_dsns, jobs)
    wait_for(
        lambda: [r[1:] for r in hot_rows(shard_dsns)] == [("RUNNING", 1, 3, "worker-a")] * len(jobs),
        timeout=20,
        what="worker-a preloading every job",
    )
    assert sink.count() == 0 and datetime.now(UTC) < due  # held, not fired
    a.sigkill()
    b = procs.worker("worker-b", prefetch_seconds=0).wait_ready()
    wait_for(lambda: finished(shard_dsns, jobs) == len(jobs), timeout=60, what="every job to finish")
    assert hot_rows(shard_dsns) == []
    firings = sink.by_job()
    for p in jobs:
        assert history(shard_dsns, [p])[text_id(p)] == [("SUCCEEDED", 2)]
        assert attempt_log(shard_dsns, p) == [(1, "LEASE_EXPIRED", "worker-a"), (2, "SUCCEEDED", "worker-b")]
        assert [f.attempt for f in firings[text_id(p)]] == [2]  # fired once, never by worker-a
    assert b.metric(SUCCEEDED) == len(jobs)


def test_killed_worker_gives_back_a_wave_it_preloaded_by_itself(
    procs: ProcessHarness, sink: FaultSink, shard_dsns: list[str]
) -> None:
    # No preloading knob set: worker-a sees a wave coming (1,500 jobs per
    # shard due in the same second, more than its regular claims start on
    # time) and claims it ahead, held in its timing wheel. SIGKILLed before
    # the instant, it fires none of them; after their leases (which run from
    # run_at) worker-b fires each one, once.
    n = 3_000
    a = procs.worker("worker-a").wait_ready()
    due = datetime.now(UTC) + timedelta(seconds=8)
    ids = copy_jobs(shard_dsns, n, sink.url, due=due, timeout=2)
    wait_for(
        lambda: tally(shard_dsns, "SELECT status || ':' || attempt || ':' || locked_by, count(*) FROM jobs GROUP BY 1")
        == {"RUNNING:1:worker-a": n},
        timeout=30,
        interval=0.25,
        what="worker-a preloading the whole wave",
    )
    assert sink.count() == 0 and datetime.now(UTC) < due  # held, not fired
    a.sigkill()
    b = procs.worker("worker-b").wait_ready()
    wait_for(
        lambda: total(shard_dsns, "SELECT count(*) FROM job_history") >= n,
        timeout=120,
        interval=0.25,
        what=f"{n} jobs in history",
    )
    assert total(shard_dsns, "SELECT count(*) FROM jobs") == 0
    assert tally(shard_dsns, "SELECT status || ':' || attempt, count(*) FROM job_history GROUP BY 1") == {
        "SUCCEEDED:2": n
    }
    assert tally(
        shard_dsns, "SELECT attempt || ':' || outcome || ':' || worker, count(*) FROM job_attempts GROUP BY 1"
    ) == {"1:LEASE_EXPIRED:worker-a": n, "2:SUCCEEDED:worker-b": n}
    firings = sink.by_job()
    assert set(firings) == set(ids)
    assert all([f.attempt for f in firings[i]] == [2] for i in ids)  # never fired by worker-a
    assert b.metric(SUCCEEDED) == n


# -- 2. SIGSTOP past the lease, SIGCONT after another worker finished --------------------


def test_paused_worker_writes_nothing_for_a_job_it_lost(
    procs: ProcessHarness, sink: FaultSink, shard_dsns: list[str]
) -> None:
    a = procs.worker("worker-a").wait_ready()
    assert a.metric(FENCED) == 0
    # Attempt 1 is answered (200) while worker-a is stopped: the success waits
    # in its socket and is what it reports when it runs again.
    jobs = [
        job_on(SHARD_MAP, i % SHARDS, sink.url, payload={"sleep_first": 2.0}, timeout=3600) for i in range(2)
    ]
    ids = {text_id(p) for p in jobs}
    create_jobs(shard_dsns, jobs)
    wait_for(lambda: ids <= sink.job_ids(attempt=1), timeout=20, what="worker-a firing every job")
    a.sigstop()
    stopped_at = time.monotonic()

    def answered() -> bool:
        return all(f.answered_at for f in sink.snapshot() if f.attempt == 1)

    wait_for(answered, timeout=10, what="the sink answering attempt 1")
    first = [f for f in sink.snapshot() if f.attempt == 1]
    assert all(f.status == 200 and (f.answered_at or 0) > stopped_at for f in first), (
        "the test's premise: worker-a was stopped before the target answered"
    )

    b = procs.worker("worker-b").wait_ready()
    wait_for(lambda: finished(shard_dsns, jobs) == len(jobs), timeout=30, what="worker-b finishing")
    assert a.alive()
    a.sigcont()
    # Each job costs worker-a at least one fenced write: its heartbeat finds
    # the lease gone, or its completion matches no row.
    wait_for(
        lambda: a.metric(FENCED) >= len(jobs),
        timeout=15,
        what="worker-a's stale writes to be fenced",
    )
    fenced_by = a.metric_by(FENCED, "operation")

    assert a.alive(), a.log_tail()
    assert a.metric(SUCCEEDED) == 0
    assert b.metric(SUCCEEDED) == len(jobs) and b.metric(FENCED) == 0
    assert_rerun_by_worker_b(shard_dsns, jobs, sink, first_answer=200)
    print(f"\nstale worker's fenced writes by operation: {fenced_by}")


# -- 3. a wave: 10,000 jobs due at once ----------------------------------------------------


def copy_jobs(
    dsns: list[str], count: int, url: str, *, due: datetime | None = None, timeout: int = 30
) -> list[str]:
    """``count`` jobs due at ``due`` (default: now), COPYed into the shards
    their ids route to."""
    due = due or datetime.now(UTC) - timedelta(seconds=1)
    by_shard: dict[int, list[Any]] = {i: [] for i in range(len(dsns))}
    for _ in range(count):
        job_id = shardmap.new_uuid()
        by_shard[SHARD_MAP.shard_of(job_id)].append(job_id)
    target = Jsonb({"kind": "HTTP", "url": url})
    payload = Jsonb({})
    for shard, ids in by_shard.items():
        with psycopg.connect(dsns[shard]) as conn, conn.cursor() as cur:
            with cur.copy(
                "COPY jobs (id, owner_service, type, scheduled_for, run_at, max_attempts, "
                "timeout_seconds, target_kind, target, payload) FROM STDIN"
            ) as copy:
                for job_id in ids:
                    copy.write_row(
                        (job_id, OWNER, "WAVE", due, due, 3, timeout, "HTTP", target, payload)
                    )
    return [shardmap.encode_id("job", i) for ids in by_shard.values() for i in ids]


def test_ten_thousand_due_jobs_each_succeed_exactly_once(
    procs: ProcessHarness, sink: FaultSink, shard_dsns: list[str]
) -> None:
    n = 10_000
    workers = [procs.worker(f"worker-{i}") for i in range(2)]
    for w in workers:
        w.wait_ready()
    started = time.monotonic()
    ids = copy_jobs(shard_dsns, n, sink.url)
    inserted = time.monotonic()
    wait_for(
        lambda: total(shard_dsns, "SELECT count(*) FROM job_history") >= n,
        timeout=200,
        interval=0.25,
        what=f"{n} jobs in history",
    )
    done = time.monotonic()

    assert total(shard_dsns, "SELECT count(*) FROM jobs") == 0
    statuses = tally(shard_dsns, "SELECT status, count(*) FROM job_history GROUP BY status")
    assert statuses == {"SUCCEEDED": n}
    assert total(shard_dsns, "SELECT count(DISTINCT id) FROM job_history") == n
    # Exactly one SUCCEEDED attempt per job, and it is the attempt history kept.
    assert total(shard_dsns, "SELECT count(*) FROM job_attempts WHERE outcome = 'SUCCEEDED'") == n
    assert (
        total(
            shard_dsns,
            "SELECT count(DISTINCT job_id) FROM job_attempts WHERE outcome = 'SUCCEEDED'",
        )
        == n
    )
    assert (
        total(
            shard_dsns,
            "SELECT count(*) FROM job_history h JOIN job_attempts a "
            "ON a.job_id = h.id AND a.attempt = h.attempt AND a.outcome = 'SUCCEEDED'",
        )
        == n
    )
    seen = sink.job_ids()
    assert seen >= set(ids)
    assert len(seen) == n

    outcomes = tally(shard_dsns, "SELECT outcome, count(*) FROM job_attempts GROUP BY outcome")
    per_worker = tally(
        shard_dsns,
        "SELECT worker, count(*) FROM job_attempts WHERE outcome = 'SUCCEEDED' GROUP BY worker",
    )
    firings = sink.count()
    wall = done - started
    print(
        f"\n{n} jobs: insert {inserted - started:.2f} s, all SUCCEEDED after {wall:.2f} s "
        f"({n / wall:.0f} jobs/s; {n / (done - inserted):.0f} jobs/s from the commit); "
        f"firings {firings} ({firings - n} repeats); attempt outcomes {dict(outcomes)}; "
        f"per worker {dict(per_worker)}; fenced {[w.metric(FENCED) for w in workers]}"
    )


# -- 4. a shard stopped for 10 s, then started ---------------------------------------------


def key_on(shard: int, prefix: str) -> str:
    for i in range(1000):
        key = f"{prefix}-{i}"
        if SHARD_MAP.shard_of_slot(shardmap.key_slot(OWNER, key)) == shard:
            return key
    raise AssertionError("no key found")


def assert_unavailable(resp: httpx.Response, shard: int) -> None:
    assert resp.status_code == 503, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert int(resp.headers["retry-after"]) > 0
    body = resp.json()
    assert body["status"] == 503 and body["shard"] == shard and body["detail"]


def test_shard_outage_answers_503_and_loses_nothing(
    own_servers: list[PgServer], own_procs: ProcessHarness, sink: FaultSink
) -> None:
    dsns = own_procs.shards
    down = 1
    api = own_procs.api(connect_timeout=1)
    # Leases longer than the outage: the in-flight job's outcome must be
    # written late, not lost to an expired lease.
    workers = [own_procs.worker(f"worker-{i}", lease_seconds=30) for i in range(2)]
    api.wait_ready()
    for w in workers:
        w.wait_ready()

    now = datetime.now(UTC)
    before = [job_on(SHARD_MAP, s, sink.url, run_at=now - timedelta(seconds=1)) for s in range(SHARDS)]
    # Fired before the stop, answered while the shard is down: its outcome
    # cannot be written until the shard is back.
    inflight = job_on(SHARD_MAP, down, sink.url, payload={"sleep": 2.0}, run_at=now - timedelta(seconds=1))
    later = [
        job_on(SHARD_MAP, s, sink.url, run_at=now + timedelta(seconds=delay), max_attempts=10)
        for s in range(SHARDS)
        for delay in (4, 8, 16)  # during the outage, and after it
    ]
    jobs = [*before, inflight, *later]
    create_jobs(dsns, jobs)
    wait_for(lambda: finished(dsns, before) == len(before), timeout=20, what="the first jobs")
    wait_for(lambda: text_id(inflight) in sink.job_ids(), timeout=20, what="the long job firing")

    client = httpx.Client(
        base_url=api.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=20
    )
    with client:
        stopped = time.monotonic()
        own_servers[down].stop()

        [on_down] = [text_id(p) for p in before if SHARD_MAP.shard_of(p.id) == down]
        [on_up] = [text_id(p) for p in before if SHARD_MAP.shard_of(p.id) != down]
        assert_unavailable(client.get(f"/api/v1/jobs/{on_down}"), down)
        key = key_on(down, "outage")
        body = api_body(sink.url, datetime.now(UTC))
        assert_unavailable(
            client.post("/api/v1/jobs", json=body, headers={"Idempotency-Key": key}), down
        )
        # Without a key any shard will do: the live one takes it.
        created = []
        for _ in range(4):
            resp = client.post("/api/v1/jobs", json=api_body(sink.url, datetime.now(UTC)))
            assert resp.status_code == 201, resp.text
            job_id = resp.json()["jobId"]
            assert SHARD_MAP.shard_of(shardmap.decode_id("job", job_id)) != down
            created.append(job_id)
        resp = client.get(f"/api/v1/jobs/{on_up}")
        assert resp.status_code == 200 and resp.json()["status"] == "SUCCEEDED", resp.text
        assert all(w.alive() for w in workers) and api.alive()

        time.sleep(max(0.0, stopped + 10 - time.monotonic()))  # the outage is the fault itself
        own_servers[down].start()
        restarted = time.monotonic()

        wait_for(lambda: finished(dsns, jobs) == len(jobs), timeout=60, what="every job to finish")
        jobs_back = time.monotonic() - restarted
        for job_id in created:

            def succeeded(job_id: str = job_id) -> bool:
                return bool(client.get(f"/api/v1/jobs/{job_id}").json().get("status") == "SUCCEEDED")

            wait_for(succeeded, timeout=30, what=f"{job_id} created during the outage to succeed")
        # The API reaches the shard again; the key that was refused works now.
        resp = client.get(f"/api/v1/jobs/{on_down}")
        assert resp.status_code == 200 and resp.json()["status"] == "SUCCEEDED", resp.text
        first = client.post("/api/v1/jobs", json=body, headers={"Idempotency-Key": key})
        assert first.status_code == 201, first.text
        again = client.post("/api/v1/jobs", json=body, headers={"Idempotency-Key": key})
        assert again.status_code == 200 and again.json()["jobId"] == first.json()["jobId"]
        created.append(first.json()["jobId"])
        wait_for(
            lambda: client.get(f"/api/v1/jobs/{created[-1]}").json().get("status") == "SUCCEEDED",
            timeout=30,
            what="the keyed job to succeed",
        )

    for job_id, found in history(dsns, jobs).items():
        assert [status for status, _ in found] == ["SUCCEEDED"], (job_id, found)
    assert hot_rows(dsns) == []
    assert {text_id(p) for p in jobs} | set(created) <= sink.job_ids()
    assert all(w.alive() for w in workers) and api.alive()
    # The job in flight across the outage: the target answered attempt 1
    # while its shard was down, well within the job's lease. The completer
    # kept the outcome and wrote it once the shard came back: one attempt,
    # one firing, no second run.
    firings = sink.by_job()[text_id(inflight)]
    assert [(f.attempt, f.status) for f in firings] == [(1, 200)]
    log = attempt_log(dsns, inflight)
    assert [(a, o) for a, o, _ in log] == [(1, "SUCCEEDED")], log
    print(
        f"\nshard {down} stopped for 10 s: every job was done {jobs_back:.2f} s after its restart; "
        f"the in-flight job across the outage: {log}"
    )


# -- 5. SIGTERM with jobs in flight -------------------------------------------------------------


def test_sigterm_finishes_or_releases_in_flight_jobs(
    procs: ProcessHarness, sink: FaultSink, shard_dsns: list[str]
) -> None:
    # One firing at a time to "localhost" (a limit of 1 on the one shard
    # its jobs are on): the jobs behind it are not claimed (issue 44: they
    # stay SCHEDULED, no attempt used), and the stop leaves them so.
    held_url = sink.url.replace("127.0.0.1", "localhost")
    a = procs.worker("worker-a", stop_grace_seconds=4, target_limits="localhost=1").wait_ready()
    short = [job_on(SHARD_MAP, i % SHARDS, sink.url, payload={"sleep": 1.0}) for i in range(3)]
    long = [
        job_on(SHARD_MAP, i % SHARDS, sink.url, payload={"sleep_first": HANG}, timeout=3600) for i in range(3)
    ]
    # The first holds the limit's one permit; those behind it never hang
    # (their first attempt is worker-b's).
    queued = [
        job_on(SHARD_MAP, 0, held_url, payload={"sleep_first": HANG} if i == 0 else {}, timeout=3600)
        for i in range(3)
    ]
    waiting = {p.id for p in queued[1:]}
    jobs = [*short, *long, *queued]
    create_jobs(shard_dsns, [*short, *long, queued[0]])
    wait_for(lambda: text_id(queued[0]) in sink.job_ids(), timeout=20, what="the first localhost firing")
    create_jobs(shard_dsns, queued[1:])
    wait_for(
        lambda: {text_id(p) for p in [*short, *long]} <= sink.job_ids(attempt=1),
        timeout=20,
        what="worker-a firing its jobs",
    )
    time.sleep(1.0)  # five polls: the jobs over the limit had every chance to be claimed
    assert not running(shard_dsns, queued[1:])
    assert sink.job_ids() & {text_id(p) for p in queued} == {text_id(queued[0])}
    held = [r for r in hot_rows(shard_dsns) if r[0] not in waiting]  # the short ones may have finished
    assert {(status, by) for _, status, _, _, by in held} == {("RUNNING", "worker-a")}
    assert len(held) + finished(shard_dsns, short) == len(jobs) - len(waiting)
    assert a.terminate(timeout=30) == 0

    # Short jobs finished within the grace; the others went back at once,
    # without waiting for their lease to run out.
    assert history(shard_dsns, short) == {text_id(p): [("SUCCEEDED", 1)] for p in short}
    # The stop started no firing: worker-a called the target for the jobs
    # it had started before, and for no other.
    fired = [*short, *long, queued[0]]
    assert sink.job_ids() == {text_id(p) for p in fired}
    left = {r[0]: r for r in hot_rows(shard_dsns)}
    assert set(left) == {p.id for p in [*long, *queued]}
    for p in [*long, *queued]:
        _, status, attempt, max_attempts, locked_by = left[p.id]
        # A fired job used its attempt; one held back by the limit never had one.
        assert (status, attempt, locked_by) == ("SCHEDULED", 0 if p.id in waiting else 1, None)
        assert max_attempts == p.max_attempts

    b = procs.worker("worker-b").wait_ready()
    wait_for(lambda: finished(shard_dsns, jobs) == len(jobs), timeout=30, what="worker-b finishing")
    for p in [*long, *queued]:
        attempt = 1 if p.id in waiting else 2
        assert history(shard_dsns, [p])[text_id(p)] == [("SUCCEEDED", attempt)]
        assert [(o, w) for _, o, w in attempt_log(shard_dsns, p)][-1] == ("SUCCEEDED", "worker-b")
    assert (
        total(shard_dsns, "SELECT count(*) FROM job_attempts WHERE outcome = 'LEASE_EXPIRED'") == 0
    )
    assert hot_rows(shard_dsns) == []
    assert b.metric(SUCCEEDED) == len(long) + len(queued)


def test_sigterm_gives_back_preloaded_jobs_waiting_at_their_gates(
    procs: ProcessHarness, sink: FaultSink, shard_dsns: list[str]
) -> None:
    # worker-a holds jobs due in a few seconds; within PRESTART (1 s) of
    # their tick each has a task waiting at a gate. SIGTERM then, with a long
    # grace: the tasks are taken back at once (the stop does not wait out
    # the grace for jobs that never started), nothing fires, each job goes
    # back with its attempt refunded, and worker-b fires each once.
    a = procs.worker("worker-a", prefetch_seconds=30, stop_grace_seconds=60).wait_ready()
    due = datetime.now(UTC) + timedelta(seconds=5)
    jobs = [job_on(SHARD_MAP, i % SHARDS, sink.url, run_at=due, timeout=2) for i in range(8)]
    create_jobs(shard_dsns, jobs)
    wait_for(
        lambda: [r[1:] for r in hot_rows(shard_dsns)] == [("RUNNING", 1, 3, "worker-a")] * len(jobs),
        timeout=20,
        what="worker-a preloading every job",
    )
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds() - 0.6))  # inside PRESTART
    assert datetime.now(UTC) < due - timedelta(seconds=0.2)
    assert a.terminate(timeout=20) == 0  # well inside the 60 s grace
    assert sink.count() == 0  # nothing fired
    left = {r[0]: r[1:] for r in hot_rows(shard_dsns)}
    assert set(left) == {p.id for p in jobs}
    for p in jobs:  # released at once, never fired: the attempt given back
        assert left[p.id] == ("SCHEDULED", 1, p.max_attempts + 1, None)
    b = procs.worker("worker-b").wait_ready()
    wait_for(lambda: finished(shard_dsns, jobs) == len(jobs), timeout=30, what="worker-b finishing")
    firings = sink.by_job()
    for p in jobs:
        assert history(shard_dsns, [p])[text_id(p)] == [("SUCCEEDED", 2)]
        assert [f.attempt for f in firings[text_id(p)]] == [2]  # once, by worker-b
    assert total(shard_dsns, "SELECT count(*) FROM job_attempts WHERE outcome = 'LEASE_EXPIRED'") == 0
    assert b.metric(SUCCEEDED) == len(jobs)


# -- 5b. SIGTERM: the last outcomes, and a shard that is down ------------------------------------


def test_sigterm_records_jobs_that_finish_within_the_grace(
    procs: ProcessHarness, sink: FaultSink, shard_dsns: list[str]
) -> None:
    a = procs.worker("worker-a", stop_grace_seconds=10).wait_ready()
    jobs = [job_on(SHARD_MAP, i % SHARDS, sink.url, payload={"sleep": 1.0 + i / 4}) for i in range(4)]
    create_jobs(shard_dsns, jobs)
    wait_for(
        lambda: {text_id(p) for p in jobs} <= sink.job_ids(attempt=1),
        timeout=20,
        what="worker-a firing its jobs",
    )
    assert a.terminate(timeout=30) == 0
    # Nobody else runs: what worker-a did not write before exiting is still RUNNING.
    assert hot_rows(shard_dsns) == []
    assert history(shard_dsns, jobs) == {text_id(p): [("SUCCEEDED", 1)] for p in jobs}


def test_sigterm_while_a_shard_is_down_still_exits(
    own_servers: list[PgServer], own_procs: ProcessHarness, sink: FaultSink
) -> None:
    dsns = own_procs.shards
    down = 1
    a = own_procs.worker("worker-a", stop_grace_seconds=2).wait_ready()
    jobs = [job_on(SHARD_MAP, down, sink.url, payload={"sleep": 1.0 + i}) for i in range(2)]
    create_jobs(dsns, jobs)
    wait_for(
        lambda: {text_id(p) for p in jobs} <= sink.job_ids(attempt=1),
        timeout=20,
        what="worker-a firing its jobs",
    )
    own_servers[down].stop()
    wait_for(
        lambda: all(f.answered_at for f in sink.snapshot()), timeout=10, what="the sink answering"
    )
    # The outcomes cannot be written; a graceful stop must still end (the
    # leases will run out and the jobs run again: at least once).
    assert a.terminate(timeout=15) == 0
    own_servers[down].start()
    b = own_procs.worker("worker-b").wait_ready()
    wait_for(lambda: finished(dsns, jobs) == len(jobs), timeout=30, what="worker-b finishing")
    assert {k: [s for s, _ in v] for k, v in history(dsns, jobs).items()} == {
        text_id(p): ["SUCCEEDED"] for p in jobs
    }
    assert b.alive()


# -- 6. a shard that refuses writes for a while -----------------------------------------------


def set_read_only(dsn: str, on: bool) -> None:
    """Make a shard's database refuse writes (as a standby would), or accept
    them again; its current sessions are ended so that clients reconnect."""
    admin, name = dsn.rsplit("/", 1)
    with psycopg.connect(f"{admin}/postgres", autocommit=True) as conn:
        setting = (
            "SET default_transaction_read_only = on"
            if on
            else "RESET default_transaction_read_only"
        )
        conn.execute(sql.SQL("ALTER DATABASE {} " + setting).format(sql.Identifier(name)))
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )


def test_worker_resumes_a_shard_that_refused_writes_for_a_while(
    procs: ProcessHarness, sink: FaultSink, shard_dsns: list[str]
) -> None:
    down = 1
    w = procs.worker("worker-a").wait_ready()
    due = datetime.now(UTC) + timedelta(seconds=2)
    jobs = [
        job_on(SHARD_MAP, s, sink.url, run_at=due, max_attempts=10) for s in range(SHARDS) for _ in range(2)
    ]
    create_jobs(shard_dsns, jobs)
    # A database that refuses writes: a standby, or an operator's freeze.
    # Claims, heartbeats and completions there fail; nothing else should.
    set_read_only(shard_dsns[down], True)
    time.sleep(4)  # the fault itself
    set_read_only(shard_dsns[down], False)
    wait_for(
        lambda: finished(shard_dsns, jobs) == len(jobs), timeout=15, what="every job to finish"
    )
    assert history(shard_dsns, jobs) == {text_id(p): [("SUCCEEDED", 1)] for p in jobs}
    assert w.alive()
