"""The backlog probe: due-but-unclaimed jobs per shard, as gauges."""

from __future__ import annotations

from cluster import metrics
from cluster.model import BacklogParams
from cluster.store.contracts.upkeep import JobUpkeep

__all__ = ["BacklogProbe"]


class BacklogProbe:
    """Due-but-unclaimed jobs per shard, as gauges (the on-call's first look).

    Run by every owner of a shard, not only its leader (``LeaderLoop(...,
    owners_too=True)``), so the figures keep moving while ZooKeeper is away;
    dashboards take the max over owners."""

    name = "backlog"

    def __init__(self, store: JobUpkeep) -> None:
        self.store = store

    async def run_once(self, shard: int) -> int:
        stats = await self.store.backlog(shard, BacklogParams())
        metrics.BACKLOG.labels(str(shard)).set(stats.due)
        metrics.OLDEST_DUE_AGE.labels(str(shard)).set(stats.oldest_due_age_seconds)
        return stats.due
