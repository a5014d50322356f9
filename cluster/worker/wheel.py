"""The timing wheel: claimed jobs held until their ``run_at``.

A job claimed ahead of its time (prefetched, or preloaded ahead of a wave)
waits here, not in a sleeping coroutine: jobs due in the same tick share one
event-loop timer, so a wave of 50,000 held jobs costs one timer and no task
each while it waits (less memory, no timer per job).

The instant itself is what a wave's lateness is made of: the last of a
worker's 50,000 jobs starts after the 49,999 before it. Making a task and
taking its first step was half of a job's start (uvloop, 50,000 tasks: 10.9
against 4.9 us a job to wake a task already waiting). So :data:`PRESTART`
seconds before its tick, a tick's jobs get their tasks, each waiting on a
*gate* (a future per slice of jobs) that opens at the tick; at the instant
only the gates open. A job held within that last stretch gets its task when
it is held. None of this fires anything early: a task passes its gate at
the tick, and the firing coroutine still waits out any remainder of its
``run_at``.

An instant of many jobs starts in slices (one gate each, or one slice of
tasks made each turn), so the event loop still answers (its /metrics,
health checks, completions) while a very large instant starts.
"""

from __future__ import annotations

import asyncio
import gc
import math
from collections.abc import Callable, Coroutine
from typing import Any

from cluster.worker.inflight import InFlight

__all__ = ["PRESTART", "TICK", "TimingWheel"]

# Granularity of the wheel, seconds: a held job starts up to one tick after
# its run_at (the event loop's timers are milliseconds anyway).
TICK = 0.001
# How long before its tick a held job's task is made, waiting at its gate:
# long enough to make a worker's share of a wave (50,000 tasks at about
# 5 us each) before the instant on a slow machine. The tasks' memory is
# within the preload budget, which counts a held job as a started one.
PRESTART = 1.0


class _Gate:
    """A slice of a tick's tasks, waiting for the tick."""

    __slots__ = ("entries", "future")

    def __init__(self) -> None:
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.entries: list[InFlight] = []

    def take_back(self) -> None:
        """A stop before the gate opened: its jobs have not started; the
        worker releases them as never fired."""
        for entry in self.entries:
            if entry.task is not None and not entry.task.done():
                entry.task.cancel()
                entry.task = None
        self.entries.clear()


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
        # Per tick whose tasks are being made: the gates made so far (each
        # for at most a slice of tasks; kept until all are open) and how
        # many of the tick's jobs have their task.
        self._prestarts: dict[int, asyncio.TimerHandle] = {}
        self._gates: dict[int, list[_Gate]] = {}
        self._prepared: dict[int, int] = {}
        # Preloaded jobs per tick, so that releasing a tick updates the count
        # without a pass over its jobs (every microsecond at the instant is
        # lateness of the last job).
        self._preloaded_in: dict[int, int] = {}
        self.preloaded = 0  # preloaded jobs held now
        # Instants being started in slices: until the last slice, outcomes
        # and metrics wait (starts first).
        self._starting = 0
        # The cyclic collector is off while an instant starts (see
        # _pause_gc); True while this wheel holds it off.
        self._gc_paused = False
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
            at = tick * TICK
            self.timers[tick] = loop.call_at(at, self._release, tick)
            if at - PRESTART > loop.time():
                self._prestarts[tick] = loop.call_at(at - PRESTART, self._prestart, tick, 0)
            else:
                self._prepared[tick] = 0  # within the last stretch: tasks as jobs come
        bucket.append(entry)
        if entry.preloaded:
            self._preloaded_in[tick] = self._preloaded_in.get(tick, 0) + 1
            self.preloaded += 1
        # Every job before this one has its task (the tick's tasks are made,
        # and not by a pass still under way): this one gets its own now.
        if self._prepared.get(tick) == len(bucket) - 1:
            self._gate(tick, entry)
            self._prepared[tick] = len(bucket)

    def clear(self) -> None:
        """Drop every held job (a stopping worker releases them itself). A
        job whose task waits at a gate loses it: it has not started, and
        the worker releases it as a job never fired."""
        for handle in (*self.timers.values(), *self._prestarts.values()):
            handle.cancel()
        for gates in self._gates.values():
            for gate in gates:
                if not gate.future.done():
                    gate.take_back()
        self.timers.clear()
        self._prestarts.clear()
        self._gates.clear()
        self._prepared.clear()
        self._buckets.clear()
        self._preloaded_in.clear()
        self.preloaded = 0
        self._resume_gc(force=True)  # a stop in the middle of an instant

    # -- before the tick: tasks at their gates --------------------------------

    def _prestart(self, tick: int, first: int) -> None:
        """Tasks for the tick's jobs from ``first`` on, a slice a turn."""
        self._prestarts.pop(tick, None)
        bucket = self._buckets.get(tick)
        if bucket is None or self._stopping.is_set():
            return
        end = min(first + self._slice, len(bucket))
        for entry in bucket[first:end]:
            self._gate(tick, entry)
        self._prepared[tick] = end
        if end < len(bucket):  # jobs held meanwhile are taken by the next turn
            asyncio.get_running_loop().call_soon(self._prestart, tick, end)

    def _gate(self, tick: int, entry: InFlight) -> None:
        if entry.lost or entry.task is not None:
            return
        gates = self._gates.setdefault(tick, [])
        if not gates or len(gates[-1].entries) >= self._slice:
            gates.append(_Gate())
        gate = gates[-1]
        gate.entries.append(entry)
        entry.task = asyncio.create_task(self._gated(gate.future, entry), name=entry.job_id)

    async def _gated(self, gate: asyncio.Future[None], entry: InFlight) -> None:
        await gate
        await self._run(entry)

    # -- at the tick ----------------------------------------------------------

    def _release(self, tick: int) -> None:
        self.timers.pop(tick, None)
        prestart = self._prestarts.pop(tick, None)
        if prestart is not None:
            prestart.cancel()
        self.preloaded -= self._preloaded_in.pop(tick, 0)
        entries = self._buckets.pop(tick, [])
        gates = self._gates.get(tick, [])  # dropped once all are open
        prepared = self._prepared.pop(tick, 0)
        if len(entries) > self._slice:
            self._starting += 1
            self.all_started.clear()
            self._pause_gc()
        self._open(tick, gates, 0, entries, prepared)

    def _pause_gc(self) -> None:
        """No cyclic collection while an instant starts. Each of a worker's
        50,000 starts leaves a few young objects (its outcome, its frames),
        so the young generation filled every 12,000 starts or so, and each
        of those collections walked 50,000 objects to free none: four pauses
        of 8-18 ms in the first half second of a 100,000-job wave, all of
        it lateness of the jobs after them. Reference counting frees what a
        start leaves; the collector resumes once the instant has started."""
        if not self._gc_paused and gc.isenabled():
            gc.disable()
            self._gc_paused = True

    def _resume_gc(self, *, force: bool = False) -> None:
        """The collector back on once no instant is starting, or at once
        with ``force`` (a stop, which starts nothing more)."""
        if self._gc_paused and (force or not self._starting):
            self._gc_paused = False
            gc.enable()

    def _open(
        self, tick: int, gates: list[_Gate], index: int, entries: list[InFlight], prepared: int
    ) -> None:
        """Open the gates one a turn (a slice of tasks each), then start the
        jobs that have no task yet. A stop meanwhile has taken back the
        tasks behind the gates still shut (:meth:`clear`)."""
        if index < len(gates) and not self._stopping.is_set():
            gate = gates[index]
            if not gate.future.done():
                gate.future.set_result(None)
            gate.entries = []  # through: no longer the wheel's to take back
            # After the tasks just let through have taken their step.
            asyncio.get_running_loop().call_soon(
                self._open, tick, gates, index + 1, entries, prepared
            )
            return
        if self._gates.get(tick) is gates:
            del self._gates[tick]
        self._start(entries, prepared)

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
                # After the last slice's tasks have taken their first step.
                asyncio.get_running_loop().call_soon(self._resume_gc)
