"""A wave's instant in one worker process, without a cluster: N held jobs
due at one moment, released by the worker's own timing wheel and started by
its own firing path (NOOP target, the anchored clock a worker runs on).

The lateness p99 of a round-hour wave is mostly this: each worker starts
its share one job after another. This measures what a start costs in-process,
so a change to the start path can be judged in seconds rather than by
cluster runs whose noise on a shared machine is larger than the change::

    python -m benchmarks.instant [--jobs 50000] [--rounds 5]

Prints each round's last start after the instant (the worker's own lateness
reading) and that divided by the jobs, then the median. Writes nothing.
Nothing is written to a store: the outcomes stay in the completer's queue.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import uvloop

import shardmap
from cluster.clock import AnchoredClock
from cluster.config import Settings
from cluster.coordination.base import StaticCoordinator
from cluster.model import ClaimedJob
from cluster.service import tune_gc
from cluster.targets.noop import NoopTarget
from cluster.worker.inflight import InFlight
from cluster.worker.worker import Worker

__all__ = ["main", "one_instant"]

_LEAD = 1.5  # seconds from holding the jobs to their instant (> the wheel's PRESTART)


class _NoStore:
    shard_count = 1

    async def finish_jobs(self, shard: int, params: Any) -> set[Any]:
        return set()


async def one_instant(jobs: int) -> tuple[float, float]:
    """Hold ``jobs`` jobs due at one instant and let them start; returns the
    p99 and the largest lateness the worker recorded, in seconds."""
    clock = AnchoredClock()
    clock.anchor(datetime.now(UTC), time.monotonic())
    worker = Worker(
        Settings(shards=["bench"]),
        _NoStore(),  # type: ignore[arg-type]
        StaticCoordinator("bench", 1),
        {"NOOP": NoopTarget()},
        worker_id="bench",
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
            shardmap.new_uuid(0), 1, 3, "bench.instant", due, due, 30, target, "{}",
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


async def _rounds(jobs: int, rounds: int) -> list[tuple[float, float]]:
    tune_gc()  # as a worker process does
    out = []
    for _ in range(rounds):
        out.append(await one_instant(jobs))
        gc.collect()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.instant", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs due at the instant")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    results = uvloop.run(_rounds(args.jobs, args.rounds))
    for p99, last in results:
        print(
            f"instant[jobs={args.jobs:,}]: lateness p99 {p99 * 1e3:.0f} ms, last start "
            f"{last * 1e3:.0f} ms, {last / args.jobs * 1e6:.2f} us a start"
        )
    median = statistics.median(last for _, last in results)
    print(f"instant[jobs={args.jobs:,}]: median {median / args.jobs * 1e6:.2f} us a start")


if __name__ == "__main__":
    main()
