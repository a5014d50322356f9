"""The history janitor: day partitions made ahead of time, expired days dropped."""

from __future__ import annotations

import logging

from cluster.store.base import Store

__all__ = ["Janitor"]

log = logging.getLogger(__name__)


class Janitor:
    """Day partitions of history ahead of time; expired days dropped."""

    name = "janitor"

    def __init__(self, store: Store, retention_days: int) -> None:
        self.store = store
        self.retention_days = retention_days

    async def run_once(self, shard: int) -> int:
        result = await self.store.maintain_history(shard, self.retention_days)
        if result.dropped_partitions:
            log.info("dropped history partitions %s", result.dropped_partitions, extra={"shard": shard})
        return len(result.dropped_partitions)

