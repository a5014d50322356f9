"""A shard's leader-only loops: lease reaper, far→near mover, history janitor.

Each has ``run_once(shard)``; :class:`LeaderLoop` runs them on the shards this
process leads. Leadership only saves work: every ``run_once`` is safe when two
processes run it at once (SKIP LOCKED, fenced updates, idempotent DDL).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from cluster import metrics
from cluster.coordination import Coordinator
from cluster.errors import VakitError
from cluster.pgstore import PgStore
from cluster.store import Store

__all__ = ["LeaderLoop", "Janitor", "Mover", "Reaper"]

log = logging.getLogger(__name__)


class Reaper:
    """RUNNING jobs whose lease ran out go back to SCHEDULED (or FAILED)."""

    name = "reaper"

    def __init__(self, store: Store, batch: int = 1000) -> None:
        self.store = store
        self.batch = batch

    async def run_once(self, shard: int) -> int:
        total = 0
        while True:
            result = await self.store.reap_expired(shard, self.batch)
            n = result.rescheduled + result.failed
            if n:
                metrics.LEASE_EXPIRED.labels(str(shard)).inc(n)
                log.warning(
                    "leases expired: %d rescheduled, %d failed",
                    result.rescheduled,
                    result.failed,
                    extra={"shard": shard},
                )
            total += n
            if n < self.batch:
                return total


class Mover:
    """Far jobs that come within the horizon move to the hot table, a batch
    per transaction."""

    name = "mover"

    def __init__(self, store: Store, horizon_seconds: float, batch: int = 5000) -> None:
        self.store = store
        self.horizon = horizon_seconds
        self.batch = batch

    async def run_once(self, shard: int) -> int:
        total = 0
        while True:
            n = await self.store.move_far_jobs(shard, self.horizon, self.batch)
            total += n
            if n:
                metrics.MOVED.labels(str(shard)).inc(n)
            if n < self.batch:
                return total


class Janitor:
    """Day partitions of history ahead of time; expired days dropped."""

    name = "janitor"

    def __init__(self, store: PgStore, retention_days: int) -> None:
        self.store = store
        self.retention_days = retention_days

    async def run_once(self, shard: int) -> int:
        result = await self.store.maintain_history(shard, self.retention_days)
        if result.dropped_partitions:
            log.info("dropped history partitions %s", result.dropped_partitions, extra={"shard": shard})
        return len(result.dropped_partitions)


class BacklogProbe:
    """Due-but-unclaimed jobs per shard, as gauges (the on-call's first look).

    Run by every owner of a shard, not only its leader (``LeaderLoop(...,
    owners_too=True)``), so the figures keep moving while ZooKeeper is away;
    dashboards take the max over owners."""

    name = "backlog"

    def __init__(self, store: Store) -> None:
        self.store = store

    async def run_once(self, shard: int) -> int:
        stats = await self.store.backlog(shard)
        metrics.BACKLOG.labels(str(shard)).set(stats.due)
        metrics.OLDEST_DUE_AGE.labels(str(shard)).set(stats.oldest_due_age_seconds)
        return stats.due


class _Named(Protocol):
    """Any object with a ``name`` and an async ``run_once(shard) -> int``."""

    name: str

    async def run_once(self, shard: int) -> int: ...


class LeaderLoop:
    """Runs ``task.run_once(shard)`` every ``interval`` s for each led shard
    (each owned shard with ``owners_too``)."""

    def __init__(
        self,
        task: _Named,
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
