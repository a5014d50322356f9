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
  what the API's and the workers' Python does per job), in milliseconds a
  20,000-item round: the median of short rounds over about a second, and
  ``cpu_ms_best``, their best;
- ``first_touch_s_per_gib``: writing one byte per page of memory that was
  just mapped. On a VM whose balloon hands freed memory back to the host,
  the first touch of a page is slow, and a wave's processes, WAL and page
  cache touch gigabytes; a 45 s pause was seen to double it.

This vCPU changes speed by itself, for seconds at a time: on an idle
machine, rounds of 100 ms read 13.4-14.7 ms or 20.5-24.8 ms, with no
other process running, as much with two busy loops beside them. One short
reading says which of the two the run started in; the median over a
second says how much of that second was slow, and the best what the core
does at its fast level. Each is the measuring thread's own CPU time, so a
neighbour taking the core in turns does not count. Lower is faster. It
tells a slow hour from a fast one; it is no exchange rate between them,
and figures are never divided by it.
"""

from __future__ import annotations

import mmap
import statistics
import time

__all__ = ["TOUCH_BYTES", "cpu_ms", "describe", "first_touch_s_per_gib", "measure"]

# Large enough that page faults, not the loop around them, take the time
# (65,536 pages: about 10 ms of the loop against 130-220 ms of faults seen);
# small enough to cost a run under a quarter of a second.
TOUCH_BYTES = 256 * 2**20
_GIB = 2**30
# The unit cpu_ms is given in: one round of this many items.
_CPU_ITEMS = 20_000
# Rounds are this much shorter, so that about a second holds many of them.
_PROBE_ITEMS = 2_000
_CPU_SECONDS = 1.0


def _interpreter_work(items: int) -> int:
    total = 0
    for i in range(items):
        target = {"kind": "noop", "topic": "orders"}
        job = {"id": i, "owner": "billing", "attempt": i % 5, "target": target}
        text = f"{job['owner']}:{job['id']}:{job['attempt']}:{target['kind']}"
        total += len(text) + (i * 31) % 7
    return total


def cpu_ms(seconds: float = _CPU_SECONDS) -> tuple[float, float]:
    """The fixed interpreter work in CPU milliseconds a 20,000-item round:
    (median, best) of short rounds run for ``seconds`` of CPU."""
    rounds: list[float] = []
    spent = 0.0
    while spent < seconds or not rounds:
        started = time.thread_time()
        _interpreter_work(_PROBE_ITEMS)
        took = time.thread_time() - started
        rounds.append(took)
        spent += took
    scale = 1000 * _CPU_ITEMS / _PROBE_ITEMS
    return round(statistics.median(rounds) * scale, 2), round(min(rounds) * scale, 2)


def first_touch_s_per_gib(nbytes: int = TOUCH_BYTES) -> float:
    """Seconds of CPU a GiB of freshly mapped memory takes to touch, from
    writing a byte to each page of ``nbytes``."""
    region = mmap.mmap(-1, nbytes)  # anonymous: no page of it is backed yet
    try:
        started = time.thread_time()
        for offset in range(0, nbytes, mmap.PAGESIZE):
            region[offset] = 1
        seconds = time.thread_time() - started
    finally:
        region.close()  # unmapped: the pages go back to the kernel at once
    return round(seconds * _GIB / nbytes, 3)


def measure() -> dict[str, float]:
    """Both measures, as a report's ``settings.machine.yardstick``."""
    median, best = cpu_ms()
    return {
        "cpu_ms": median,
        "cpu_ms_best": best,
        "first_touch_s_per_gib": first_touch_s_per_gib(),
    }


def describe(yardstick: dict[str, float] | None) -> str:
    """The yardstick as a summary line shows it."""
    if not yardstick:
        return "yardstick=-"
    best = yardstick.get("cpu_ms_best")  # not in reports of 8d880d6
    return (
        f"yardstick=cpu:{yardstick['cpu_ms']:.0f}ms"
        + ("" if best is None else f"(best {best:.0f})")
        + f",touch:{yardstick['first_touch_s_per_gib']:.2f}s/GiB"
    )


def main() -> int:
    print(describe(measure()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
