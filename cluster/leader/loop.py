"""Runs a leader task's ``run_once(shard)`` on the shards this process leads.

Leadership only saves work: every ``run_once`` is safe when two processes
run it at once (SKIP LOCKED, fenced updates, idempotent DDL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Protocol

from cluster import metrics
from cluster.coordination.base import Coordinator
from cluster.errors import VakitError

__all__ = ["LeaderLoop", "LeaderTask"]

log = logging.getLogger(__name__)


class LeaderTask(Protocol):
    """Any object with a ``name`` and an async ``run_once(shard) -> int``."""

    name: str

    async def run_once(self, shard: int) -> int: ...


class LeaderLoop:
    """Runs ``task.run_once(shard)`` every ``interval`` s for each led shard
    (each owned shard with ``owners_too``).

    With ``wakes`` (a shard's wake-ups, :meth:`CronUpkeep.cron_soon`) the loop
    listens on each shard it runs and passes early when one comes, at most
    once per ``wake_gap`` s: wake-ups during a pass make one more pass after
    it, not one each. A wake-up only brings a pass forward; without them
    (a listener down) the loop keeps its interval."""

    def __init__(
        self,
        task: LeaderTask,
        coordinator: Coordinator,
        shard_count: int,
        interval: float,
        *,
        owners_too: bool = False,
        on_lost: Callable[[int], None] | None = None,
        wakes: Callable[[int], AsyncGenerator[None, None]] | None = None,
        wake_gap: float = 0.5,
        relisten_seconds: float = 2.0,
    ) -> None:
        self.task = task
        self.coordinator = coordinator
        self.shard_count = shard_count
        self.interval = interval
        self.owners_too = owners_too
        self.on_lost = on_lost  # called once for a shard this loop no longer runs
        self.wakes = wakes
        self.wake_gap = wake_gap
        self.relisten_seconds = relisten_seconds
        self._running: set[int] = set()
        self._woken = asyncio.Event()

    def _ours(self, shard: int) -> bool:
        if self.owners_too:
            return shard in self.coordinator.owned_shards()
        return self.coordinator.is_leader(shard)

    def wake(self) -> None:
        """Bring the next pass forward (to ``wake_gap`` after the last one)."""
        self._woken.set()

    async def run_once(self) -> int:
        total = 0
        for shard in range(self.shard_count):
            # Checked per shard, right before the work: a SUSPENDED session
            # stops leader-only work at once.
            if not self._ours(shard):
                if shard in self._running:
                    self._running.discard(shard)
                    if self.on_lost is not None:
                        self.on_lost(shard)
                continue
            self._running.add(shard)
            try:
                total += await self.task.run_once(shard)
                metrics.MAINTENANCE_LAST_SUCCESS.labels(
                    self.task.name, str(shard)
                ).set_to_current_time()
            except VakitError as exc:
                log.warning("%s failed: %s", self.task.name, exc, extra={"shard": shard})
            except Exception:
                # One shard's failure must not skip the others this round.
                log.exception("%s error", self.task.name, extra={"shard": shard})
        return total

    async def run(self, stopping: asyncio.Event) -> None:
        listening = (
            asyncio.create_task(self._listen_while_ours(stopping))
            if self.wakes is not None
            else None
        )
        try:
            while not stopping.is_set():
                self._woken.clear()  # a wake-up during the pass calls for another
                try:
                    await self.run_once()
                except Exception:
                    log.exception("%s loop error", self.task.name)
                await self._rest(stopping)
        finally:
            if listening is not None:
                listening.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listening

    async def _rest(self, stopping: asyncio.Event) -> None:
        """Until ``interval`` has passed, or ``wake_gap`` with a wake-up."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        while not stopping.is_set():
            now = loop.time()
            if now >= began + self.interval:
                return
            if self._woken.is_set():
                if now >= began + self.wake_gap:
                    return
                await _first_of([stopping], began + self.wake_gap - now)
            else:
                await _first_of([stopping, self._woken], began + self.interval - now)

    async def _listen_while_ours(self, stopping: asyncio.Event) -> None:
        """A listener on each shard this loop runs, started and stopped as
        leadership moves (checked every ``relisten_seconds``)."""
        listeners: dict[int, asyncio.Task[None]] = {}
        try:
            while not stopping.is_set():
                ours = {shard for shard in range(self.shard_count) if self._ours(shard)}
                for shard in ours - listeners.keys():
                    listeners[shard] = asyncio.create_task(self._listen(shard))
                for shard in listeners.keys() - ours:
                    listeners.pop(shard).cancel()
                await _first_of([stopping], self.relisten_seconds)
        finally:
            for task in listeners.values():
                task.cancel()
            await asyncio.gather(*listeners.values(), return_exceptions=True)

    async def _listen(self, shard: int) -> None:
        assert self.wakes is not None
        listening = metrics.LEADER_LISTENING.labels(self.task.name, str(shard))
        heard = metrics.LEADER_WAKEUPS.labels(self.task.name, str(shard))
        while True:
            try:
                async with contextlib.aclosing(self.wakes(shard)) as wakes:
                    # The first wake-up says listening began: what was
                    # written while no one listened is due a pass too.
                    began = False
                    async for _ in wakes:
                        if began:
                            heard.inc()
                        else:
                            began = True
                            listening.set(1)
                        self.wake()
            except asyncio.CancelledError:
                listening.set(0)
                raise
            except VakitError as exc:
                log.warning(
                    "%s: wake-ups from shard %d lost (%s); listening again",
                    self.task.name,
                    shard,
                    exc,
                    extra={"shard": shard},
                )
            except Exception:
                log.exception("%s wake-up listener error", self.task.name, extra={"shard": shard})
            listening.set(0)
            await asyncio.sleep(self.relisten_seconds)


async def _first_of(events: list[asyncio.Event], timeout: float) -> None:
    """Until one of ``events`` is set or ``timeout`` s have passed."""
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=max(timeout, 0.0), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
