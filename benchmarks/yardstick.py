"""A yardstick for this machine's speed in the hour a benchmark runs.

``python -m benchmarks.yardstick`` prints it; every report carries it under
``settings.machine.yardstick``, taken as the run starts, before any of its
processes (``benchmarks.report.machine_info``).

This machine's speed moves by a third and more between runs, and by half
between days: the same tree's COPYed million drained at 22,600 jobs/s one
morning and at 44,000-52,000 on other evenings (``benchmarks/README.md``).
A figure read without the speed of its hour cannot be told from a change of
code, so every run measures two fixed things in the harness process:

- ``cpu_ms``: a fixed piece of interpreter work (dicts, strings, integers:
  what the API's and the workers' Python does per job), best of five;
- ``first_touch_s_per_gib``: writing one byte per page of memory that was
  just mapped. On a VM whose balloon hands freed memory back to the host,
  the first touch of a page is slow, and a wave's processes, WAL and page
  cache touch gigabytes; a 45 s pause was seen to double it.

Lower is faster. It tells a slow hour from a fast one; it is no exchange
rate between them, and figures are never divided by it.
"""

from __future__ import annotations

import mmap
import time

__all__ = ["TOUCH_BYTES", "cpu_ms", "describe", "first_touch_s_per_gib", "measure"]

# Large enough that page faults, not the loop around them, take the time
# (65,536 pages: about 10 ms of the loop against 200-450 ms of faults seen);
# small enough to cost a run under half a second.
TOUCH_BYTES = 256 * 2**20
_GIB = 2**30
_CPU_ROUNDS = 5
_CPU_ITEMS = 20_000


def _interpreter_work() -> int:
    total = 0
    for i in range(_CPU_ITEMS):
        target = {"kind": "noop", "topic": "orders"}
        job = {"id": i, "owner": "billing", "attempt": i % 5, "target": target}
        text = f"{job['owner']}:{job['id']}:{job['attempt']}:{target['kind']}"
        total += len(text) + (i * 31) % 7
    return total


def cpu_ms(rounds: int = _CPU_ROUNDS) -> float:
    """Milliseconds of the fixed interpreter work, the best of ``rounds``:
    the best is the machine's speed, the others its neighbours' noise."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        _interpreter_work()
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 2)


def first_touch_s_per_gib(nbytes: int = TOUCH_BYTES) -> float:
    """Seconds a GiB of freshly mapped memory takes to touch, from writing a
    byte to each page of ``nbytes``."""
    region = mmap.mmap(-1, nbytes)  # anonymous: no page of it is backed yet
    try:
        started = time.perf_counter()
        for offset in range(0, nbytes, mmap.PAGESIZE):
            region[offset] = 1
        seconds = time.perf_counter() - started
    finally:
        region.close()  # unmapped: the pages go back to the kernel at once
    return round(seconds * _GIB / nbytes, 3)


def measure() -> dict[str, float]:
    """Both measures, as a report's ``settings.machine.yardstick``."""
    return {"cpu_ms": cpu_ms(), "first_touch_s_per_gib": first_touch_s_per_gib()}


def describe(yardstick: dict[str, float] | None) -> str:
    """The yardstick as a summary line shows it."""
    if not yardstick:
        return "yardstick=-"
    return (
        f"yardstick=cpu:{yardstick['cpu_ms']:.0f}ms,"
        f"touch:{yardstick['first_touch_s_per_gib']:.2f}s/GiB"
    )


def main() -> int:
    print(describe(measure()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
