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
The jobs are held and started by the worker package's own probe
(:func:`cluster.worker.measure_instant`): this module sees none of the
worker's insides.
"""

from __future__ import annotations

import argparse
import gc
import statistics

import uvloop

from cluster.processes import tune_gc
from cluster.worker import measure_instant

__all__ = ["main", "one_instant"]


async def one_instant(jobs: int) -> tuple[float, float]:
    """Hold ``jobs`` jobs due at one instant and let them start; returns the
    p99 and the largest lateness the worker recorded, in seconds (the
    worker's own probe, :func:`cluster.worker.measure_instant`)."""
    return await measure_instant(jobs)


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
