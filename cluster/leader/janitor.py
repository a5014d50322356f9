"""The history janitor: day partitions made ahead of time, expired days dropped."""

from __future__ import annotations

import logging

from cluster.clock import Clock
from cluster.model import MaintainHistoryParams
from cluster.store.base import Store

__all__ = ["Janitor"]

log = logging.getLogger(__name__)


class Janitor:
    """Day partitions of history ahead of time; expired days dropped.

    "Today" is the injected clock's date; without a clock, the database's
    (never this host's wall clock, read in the middle of the work)."""

    name = "janitor"

    def __init__(self, store: Store, retention_days: int, clock: Clock | None = None) -> None:
        self.store = store
        self.retention_days = retention_days
        self.clock = clock

    async def run_once(self, shard: int) -> int:
        today = self.clock.now().date() if self.clock is not None else None
        result = await self.store.maintain_history(
            shard, MaintainHistoryParams(retention_days=self.retention_days, today=today)
        )
        if result.dropped_partitions:
            log.info("dropped history partitions %s", result.dropped_partitions, extra={"shard": shard})
        return len(result.dropped_partitions)
