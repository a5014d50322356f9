"""The far→near mover: jobs that come within the near horizon move to the hot table."""

from __future__ import annotations

from cluster import metrics
from cluster.model import MoveFarParams
from cluster.store.contracts.upkeep import JobUpkeep

__all__ = ["Mover"]


class Mover:
    """Far jobs that come within the horizon move to the hot table, a batch
    per transaction."""

    name = "mover"

    def __init__(self, store: JobUpkeep, horizon_seconds: float, batch: int = 5000) -> None:
        self.store = store
        self.horizon = horizon_seconds
        self.batch = batch

    async def run_once(self, shard: int) -> int:
        total = 0
        while True:
            n = await self.store.move_far_jobs(
                shard, MoveFarParams(horizon_seconds=self.horizon, limit=self.batch)
            )
            total += n
            if n:
                metrics.MOVED.labels(str(shard)).inc(n)
            if n < self.batch:
                return total
