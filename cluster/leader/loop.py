"""Runs a leader task's ``run_once(shard)`` on the shards this process leads.

Leadership only saves work: every ``run_once`` is safe when two processes
run it at once (SKIP LOCKED, fenced updates, idempotent DDL).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
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
    (each owned shard with ``owners_too``)."""

    def __init__(
        self,
        task: LeaderTask,
        coordinator: Coordinator,
        shard_count: int,
        interval: float,
        *,
        owners_too: bool = False,
        on_lost: Callable[[int], None] | None = None,
    ) -> None:
        self.task = task
        self.coordinator = coordinator
        self.shard_count = shard_count
        self.interval = interval
        self.owners_too = owners_too
        self.on_lost = on_lost  # called once for a shard this loop no longer runs
        self._running: set[int] = set()

    async def run_once(self) -> int:
        total = 0
        for shard in range(self.shard_count):
            # Checked per shard, right before the work: a SUSPENDED session
            # stops leader-only work at once.
            ours = (
                shard in self.coordinator.owned_shards()
                if self.owners_too
                else self.coordinator.is_leader(shard)
            )
            if not ours:
                if shard in self._running:
                    self._running.discard(shard)
                    if self.on_lost is not None:
                        self.on_lost(shard)
                continue
            self._running.add(shard)
            try:
                total += await self.task.run_once(shard)
                metrics.MAINTENANCE_LAST_SUCCESS.labels(self.task.name, str(shard)).set_to_current_time()
            except VakitError as exc:
                log.warning("%s failed: %s", self.task.name, exc, extra={"shard": shard})
            except Exception:
                # One shard's failure must not skip the others this round.
                log.exception("%s error", self.task.name, extra={"shard": shard})
        return total

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.run_once()
            except Exception:
                log.exception("%s loop error", self.task.name)
            try:
                await asyncio.wait_for(stopping.wait(), timeout=self.interval)
            except TimeoutError:
                pass
