"""The timing wheel: claimed jobs held until their ``run_at``.

A job claimed ahead of its time (prefetched, or preloaded ahead of a wave)
waits here, not in a sleeping coroutine: jobs due in the same tick share one
event-loop timer, so a wave of 50,000 held jobs costs one timer and no task
each until its moment (less memory, less work at the instant). An instant of
many jobs starts in slices, so the event loop still answers (its /metrics,
health checks, completions) while a very large instant starts.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from typing import Any

from cluster.worker.inflight import InFlight

__all__ = ["TICK", "TimingWheel"]

# Granularity of the wheel, seconds: a held job starts up to one tick after
# its run_at (the event loop's timers are milliseconds anyway).
TICK = 0.001


class TimingWheel:
    """Held jobs by tick; ``run(entry)`` is the firing coroutine a released
    job's task runs. ``on_all_started`` is called after the last slice of a
    sliced instant (the worker then records the metrics it held back)."""

    def __init__(
        self,
        run: Callable[[InFlight], Coroutine[Any, Any, None]],
        stopping: asyncio.Event,
        on_all_started: Callable[[], None],
        slice_size: int,
    ) -> None:
        self._run = run
        self._stopping = stopping
        self._on_all_started = on_all_started
        self._slice = slice_size
        self._buckets: dict[int, list[InFlight]] = {}
        self.timers: dict[int, asyncio.TimerHandle] = {}
        # Preloaded jobs per tick, so that releasing a tick updates the count
        # without a pass over its jobs (every microsecond at the instant is
        # lateness of the last job).
        self._preloaded_in: dict[int, int] = {}
        self.preloaded = 0  # preloaded jobs held now
        # Instants being started in slices: until the last slice, outcomes
        # and metrics wait (starts first).
        self._starting = 0
        self.all_started = asyncio.Event()
        self.all_started.set()

    @property
    def starting(self) -> bool:
        """An instant is being started in slices right now."""
        return self._starting > 0

    def hold(self, entry: InFlight, due: float) -> None:
        """Keep ``entry`` until ``due`` (in the event loop's time)."""
        tick = math.ceil(due / TICK)
        bucket = self._buckets.get(tick)
        if bucket is None:
            bucket = self._buckets[tick] = []
            loop = asyncio.get_running_loop()
            self.timers[tick] = loop.call_at(tick * TICK, self._release, tick)
        bucket.append(entry)
        if entry.preloaded:
            self._preloaded_in[tick] = self._preloaded_in.get(tick, 0) + 1
            self.preloaded += 1

    def clear(self) -> None:
        """Drop every held job (a stopping worker releases them itself)."""
        for handle in self.timers.values():
            handle.cancel()
        self.timers.clear()
        self._buckets.clear()
        self._preloaded_in.clear()
        self.preloaded = 0

    def _release(self, tick: int) -> None:
        self.timers.pop(tick, None)
        self.preloaded -= self._preloaded_in.pop(tick, 0)
        entries = self._buckets.pop(tick, [])
        if len(entries) > self._slice:
            self._starting += 1
            self.all_started.clear()
        self._start(entries, 0)

    def _start(self, entries: list[InFlight], first: int) -> None:
        end = first + self._slice
        if not self._stopping.is_set():  # else stop() releases the rest
            run = self._run
            for entry in entries[first:end]:
                if not entry.lost and entry.task is None:
                    entry.task = asyncio.create_task(run(entry), name=entry.job_id)
            if end < len(entries):
                # After the tasks just created have taken their first step.
                asyncio.get_running_loop().call_soon(self._start, entries, end)
                return
        if len(entries) > self._slice:
            self._starting -= 1
            if not self._starting:
                self.all_started.set()
                self._on_all_started()
