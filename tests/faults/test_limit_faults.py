"""A worker holding a limit's permits is SIGKILLed (issue 44): the limit
still holds, and its permits come back within their lease.

The permit of a limited key is the RUNNING row itself (docs/design/limits.md):
while the dead worker's lease runs, its jobs still count against the
limit (no overshoot); when it ends, another worker has the room again,
without a restart or an operator."""

from __future__ import annotations

import time

import pytest

import shardmap
from tests.faults.test_worker_faults import text_id
from tests.helpers import wait_for
from tests.pgfixtures import SHARDS
from tests.procs import FaultSink, ProcessHarness
from tests.shards import create_jobs, job_on, rows

pytestmark = pytest.mark.faults

SHARD_MAP = shardmap.ShardMap(SHARDS)
LIMIT = 2  # one in flight per shard


def in_flight_at_most(
    sink: FaultSink, since: float, taken: tuple[tuple[float, float], ...] = ()
) -> int:
    """The most firings received after ``since`` that were in flight at once,
    with the permits ``taken`` (from, until) counted as firings."""
    events = [e for start, end in taken for e in ((start, 1), (end, -1))]
    for f in sink.snapshot():
        if f.received_at >= since:
            events.append((f.received_at, 1))
            events.append((f.answered_at if f.answered_at is not None else float("inf"), -1))
    most = now = 0
    for _, step in sorted(events):
        now += step
        most = max(most, now)
    return most


def running_by(dsns: list[str], worker: str) -> dict[str, float]:
    """The jobs ``worker`` holds, with the seconds left of each one's lease."""
    return {
        shardmap.encode_id("job", job_id): float(left)
        for job_id, left in rows(
            dsns,
            "SELECT id, extract(epoch FROM lease_until - now()) FROM jobs "
            "WHERE status = 'RUNNING' AND locked_by = %(w)s",
            {"w": worker},
        )
    }


def test_a_killed_holders_permits_come_back_within_the_lease(
    procs: ProcessHarness, sink: FaultSink, shard_dsns: list[str]
) -> None:
    # Two workers share a limit of 2 ("localhost", one in flight per
    # shard); worker-a is SIGKILLed while it holds permits.
    url = sink.url.replace("127.0.0.1", "localhost")
    limit = f"localhost={LIMIT}"
    a = procs.worker("worker-a", target_limits=limit)
    b = procs.worker("worker-b", target_limits=limit, start=False)
    a.wait_ready()
    # 15 s of work at the limit: worker-a takes the permits (alone, and then
    # first to claim again as its own outcomes are written), worker-b starts
    # meanwhile and shares the limit.
    jobs = [job_on(SHARD_MAP, i % SHARDS, url, payload={"sleep": 1.0}) for i in range(30)]
    create_jobs(shard_dsns, jobs)
    b.start()
    b.wait_ready()
    wait_for(
        lambda: bool(set(running_by(shard_dsns, "worker-a")) & sink.job_ids()),
        timeout=20,
        what="worker-a firing a job of the limited key",
    )
    a.sigkill()
    killed = time.monotonic()
    held = running_by(shard_dsns, "worker-a")
    assert 1 <= len(held) <= LIMIT
    wait_for(
        lambda: {text_id(p) for p in jobs} <= sink.job_ids(attempt=1) | sink.job_ids(attempt=2)
        and set(held) <= sink.job_ids(attempt=2),
        timeout=40,
        what="every job fired, the killed worker's again",
    )
    # While the dead worker's lease runs its permits are still taken: the
    # firings after the kill leave room for them until its jobs run again
    # (never more than the limit in all)...
    again = [
        f.received_at - killed for f in sink.snapshot() if f.job_id in held and f.attempt == 2
    ]
    # (A held permit is free again when its lease ends: the dead worker
    # no longer extends it.)
    taken = tuple((killed, killed + left) for left in held.values())
    assert in_flight_at_most(sink, killed, taken) <= LIMIT
    # ... and they come back with the lease (3 s + 1 s of grace; the
    # reaper's pass, a claim's horizon, a poll, and a margin for a loaded
    # machine), for the killed jobs to run again.
    assert max(again) <= 3 + 1 + 0.5 + 0.4 + 0.2 + 3.0
    assert b.terminate() == 0
    print(f"\nworker-a held {len(held)} permit(s); its jobs fired again {max(again):.2f} s after the SIGKILL")
