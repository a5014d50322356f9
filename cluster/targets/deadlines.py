"""Deadlines of many waits, kept with one timer.

A firing's timeout bounds each wait it makes (for a connection, for the
answer). ``asyncio.timeout`` gives every wait an event-loop timer of its
own, and on uvloop making one costs 7-14 us (measured: 40,000 timers, 7 us
each; a thousand, 14 us): more than the rest of an HTTP firing's Python.
Here a wait's future goes on a heap by its deadline, and one timer, every
:data:`GRANULARITY` seconds while any wait is pending, fails the futures
whose deadline has passed with :class:`TimeoutError`. A deadline is met
up to that much late.

Futures settled before their deadline stay on the heap until it passes
(removing them would cost a search); when those are most of the heap it is
rebuilt from the pending ones, so it holds at most about twice the waits
in progress, whatever the rate.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Any

__all__ = ["GRANULARITY", "Deadlines"]

# Seconds between checks, and so how late a timeout may be noticed.
GRANULARITY = 0.05
_MIN_REBUILD = 1_024


class Deadlines:
    """Fails pending futures whose deadline (event-loop time) has passed."""

    def __init__(self, granularity: float = GRANULARITY) -> None:
        self._granularity = granularity
        self._heap: list[tuple[float, int, asyncio.Future[Any]]] = []
        self._order = itertools.count()  # futures do not compare: ties by order
        self._timer: asyncio.TimerHandle | None = None
        self._rebuild_at = _MIN_REBUILD

    def __len__(self) -> int:
        return len(self._heap)

    def watch(self, future: asyncio.Future[Any], deadline: float) -> None:
        """Fail ``future`` with :class:`TimeoutError` if it is still pending
        at ``deadline`` (the loop's ``time()``)."""
        heap = self._heap
        heapq.heappush(heap, (deadline, next(self._order), future))
        if len(heap) > self._rebuild_at:
            self._rebuild()
        if self._timer is None:
            loop = future.get_loop()
            self._timer = loop.call_later(self._granularity, self._check, loop)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        heap = self._heap
        now = loop.time()
        while heap and heap[0][0] <= now:
            future = heapq.heappop(heap)[2]
            if not future.done():
                future.set_exception(TimeoutError())
        if heap:
            self._timer = loop.call_later(self._granularity, self._check, loop)

    def _rebuild(self) -> None:
        heap = [entry for entry in self._heap if not entry[2].done()]
        heapq.heapify(heap)
        self._heap = heap
        self._rebuild_at = max(_MIN_REBUILD, 2 * len(heap))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heap.clear()
