"""Calls that arrive together go together: single creates as one statement.

An API process serving a thousand single creates a second spent most of a
create's CPU, in the API and in PostgreSQL, on the statement around the row
(a round trip, a parse and bind, a commit) rather than on the row. Here a
call goes at once, written by its own task, when fewer than ``in_flight``
batches are being written to its shard, so an idle API adds no wait;
otherwise it waits for the next batch, which a task of the coalescer writes
with everything waiting (up to ``most``). Under load the batches grow by
themselves, with no timer to tune.

Each call still gets its own outcome: ``run`` returns one result or
exception per item, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from cluster.store.deadline import fresh_call

__all__ = ["Coalescer"]

T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[T, R]):
    """Per shard: at most ``in_flight`` batches at once, each of at most
    ``most`` items; ``run(shard, items)`` writes one batch."""

    def __init__(
        self,
        run: Callable[[int, list[T]], Awaitable[Sequence[R | BaseException]]],
        *,
        in_flight: int = 2,
        most: int = 200,
    ) -> None:
        if in_flight < 1 or most < 1:
            raise ValueError("in_flight and most must be at least 1")
        self._run = run
        self._in_flight = in_flight
        self._most = most
        self._waiting: dict[int, list[tuple[T, asyncio.Future[R]]]] = {}
        self._running: dict[int, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # referenced until done

    async def submit(self, shard: int, item: T) -> R:
        running = self._running.get(shard, 0)
        if running < self._in_flight and not self._waiting.get(shard):
            # Nothing waits: the call writes its own item in its own task (a
            # writer task and a future per call were a tenth of a single
            # create's CPU at a thousand a second). Calls that arrive
            # meanwhile wait for a writer, started when this one is done if
            # no other is free.
            self._running[shard] = running + 1
            try:
                outcome = (await self._run(shard, [item]))[0]
            finally:
                self._running[shard] -= 1
                self._start_writer(shard)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(shard, []).append((item, future))
        self._start_writer(shard)
        return await future

    def _start_writer(self, shard: int) -> None:
        """A writer for the calls waiting on ``shard``, if any and one is free."""
        if self._waiting.get(shard) and self._running.get(shard, 0) < self._in_flight:
            self._running[shard] = self._running.get(shard, 0) + 1
            task = asyncio.create_task(self._write(shard))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write(self, shard: int) -> None:
        try:
            while queue := self._waiting.get(shard):
                batch = queue[: self._most]
                del queue[: self._most]
                try:
                    # The task was started inside one caller's call, whose
                    # deadline it inherited; a batch is a call of its own.
                    with fresh_call():
                        outcomes = await self._run(shard, [item for item, _ in batch])
                except BaseException as exc:  # every caller of the batch learns it
                    outcomes = [exc] * len(batch)
                    if not isinstance(exc, Exception):
                        _settle(batch, outcomes)
                        raise
                _settle(batch, outcomes)
        finally:
            self._running[shard] -= 1


def _settle(
    batch: list[tuple[T, asyncio.Future[R]]], outcomes: Sequence[R | BaseException]
) -> None:
    for (_, future), outcome in zip(batch, outcomes, strict=True):
        if future.done():  # its caller went away (a cancelled request)
            continue
        if isinstance(outcome, asyncio.CancelledError):
            future.cancel()
        elif isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
