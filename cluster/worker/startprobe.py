"""The worker's start path measured in process: N held jobs due at one
instant, released by the worker's own timing wheel and started by its own
firing path (NOOP target, the anchored clock a worker runs on), with no
shard and no coordinator behind it.

The lateness p99 of a round-hour wave is mostly this: each worker starts
its share one job after another. A change to the start path is judged here
in seconds rather than by cluster runs, whose noise on a shared machine is
larger than the change (``python -m benchmarks.instant``). It lives in the
worker package because it holds jobs the way only the worker may (its
in-flight entries, its wheel, its completer's queue); outside code calls
:func:`measure_instant` and sees none of that.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import shardmap
from cluster.clock import AnchoredClock
from cluster.config import Settings
from cluster.coordination.base import StaticCoordinator
from cluster.model import ClaimedJob
from cluster.targets.noop import NoopTarget
from cluster.worker.inflight import InFlight
from cluster.worker.worker import Worker

__all__ = ["measure_instant"]

_LEAD = 1.5  # seconds from holding the jobs to their instant (> the wheel's PRESTART)


class _NoStore:
    """Nothing is written: the outcomes stay in the completer's queue, where
    the probe reads their lateness."""

    shard_count = 1

    async def finish_jobs(self, shard: int, params: Any) -> set[Any]:
        return set()


async def measure_instant(jobs: int) -> tuple[float, float]:
    """Hold ``jobs`` jobs due at one instant and let them start; returns the
    p99 and the largest start lateness the worker recorded, in seconds.

    Runs on the caller's event loop (a worker process runs on uvloop) and
    leaves the garbage collector as the caller set it."""
    clock = AnchoredClock()
    clock.anchor(datetime.now(UTC), time.monotonic())
    worker = Worker(
        Settings(shards=["probe"]),
        _NoStore(),  # type: ignore[arg-type]  # only finish_jobs is reached
        StaticCoordinator("probe", 1),
        {"NOOP": NoopTarget()},
        worker_id="probe",
        clock=clock,
    )
    loop = asyncio.get_running_loop()
    due = clock.now() + timedelta(seconds=_LEAD)
    instant = loop.time() + _LEAD
    target = {"kind": "NOOP"}
    state = worker._shards[0]
    entries = []
    for _ in range(jobs):
        job = ClaimedJob(
            shardmap.new_uuid(0), 1, 3, "probe.instant", due, due, 30, target, "{}",
            due + timedelta(seconds=40),
        )  # fmt: skip
        entry = InFlight(job, 0, job.lease_until, shardmap.encode_id("job", job.id))
        state.inflight[job.id] = entry
        entries.append(entry)
        worker.wheel.hold(entry, instant)
    # Every job has its task by then (made PRESTART before the instant);
    # each task ends once its outcome is queued.
    await asyncio.sleep(_LEAD)
    await asyncio.gather(*(e.task for e in entries if e.task is not None))
    queued = state.completer._results
    assert len(queued) == jobs, f"{len(queued)} of {jobs} outcomes queued"
    lateness = sorted(state.completer._result(item).lateness_seconds or 0.0 for item in queued)
    return lateness[int(0.99 * (jobs - 1))], lateness[-1]
