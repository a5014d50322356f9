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

The reading as a run starts cannot say which level a drain minutes later
ran at, and a crons wave drains some ten minutes after its run starts.
So a wave also takes :class:`SpeedProbe` readings while it drains: the
same short round every half second, reported as ``usage.cpu_speed``, which
says whether two drains that are compared ran on the same machine.
"""

from __future__ import annotations

import mmap
import statistics
import threading
import time
from typing import Any

__all__ = ["TOUCH_BYTES", "SpeedProbe", "cpu_ms", "describe", "describe_speed", "first_touch_s_per_gib", "measure"]

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


def _round_seconds() -> float:
    """One short round: this thread's CPU seconds for it."""
    started = time.thread_time()
    _interpreter_work(_PROBE_ITEMS)
    return time.thread_time() - started


def _as_cpu_ms(seconds: float) -> float:
    """A short round's seconds in cpu_ms's unit (a 20,000-item round, in ms)."""
    return seconds * 1000 * _CPU_ITEMS / _PROBE_ITEMS


def cpu_ms(seconds: float = _CPU_SECONDS) -> tuple[float, float]:
    """The fixed interpreter work in CPU milliseconds a 20,000-item round:
    (median, best) of short rounds run for ``seconds`` of CPU."""
    rounds: list[float] = []
    spent = 0.0
    while spent < seconds or not rounds:
        rounds.append(_round_seconds())
        spent += rounds[-1]
    return round(_as_cpu_ms(statistics.median(rounds)), 2), round(_as_cpu_ms(min(rounds)), 2)


class SpeedProbe:
    """The machine's speed while something runs: one short round (about 2 ms
    of CPU) every ``interval`` seconds from a thread of its own, between
    :meth:`start` and :meth:`stop`. A round is timed in the thread's own CPU
    time, so waiting for a core (or for the GIL) does not count; what counts
    is how fast a core runs the work once it has it."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.rounds: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-speed-probe", daemon=True)

    def start(self) -> SpeedProbe:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.rounds.append(_as_cpu_ms(_round_seconds()))
            self._stop.wait(self.interval)

    def stop(self) -> dict[str, Any] | None:
        """The readings: median, 90th percentile and best in cpu_ms's unit,
        and each round's (None when not one was taken)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if not self.rounds:
            return None
        ordered = sorted(self.rounds)
        return {
            "cpu_ms": round(statistics.median(ordered), 2),
            "cpu_ms_p90": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 2),
            "cpu_ms_best": round(ordered[0], 2),
            "rounds": len(ordered),
            "interval_seconds": self.interval,
            "rounds_ms": [round(r, 1) for r in self.rounds],
        }


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


def describe_speed(speed: dict[str, Any] | None) -> str:
    """A :class:`SpeedProbe`'s readings as a summary line shows them."""
    if not speed:
        return "speed_in_drain=-"
    return f"speed_in_drain=cpu:{speed['cpu_ms']:.0f}ms(p90 {speed['cpu_ms_p90']:.0f})"


def main() -> int:
    print(describe(measure()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
