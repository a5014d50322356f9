"""The history janitor: day partitions made ahead of time, expired days
dropped, and the cron occurrence ledger pruned of the same days."""

from __future__ import annotations

import logging

from cluster.clock import Clock
from cluster.model import MaintainHistoryParams, PruneOccurrencesParams
from cluster.store.base import CronStore, Store

__all__ = ["Janitor"]

log = logging.getLogger(__name__)

# Ledger rows a statement deletes, and statements a pass at most: five
# million an hour, more than 20,000 minutely crons make (1.2 million).
PRUNE_BATCH = 10_000
PRUNE_BATCHES = 500


class Janitor:
    """Day partitions of history ahead of time; expired days dropped, and
    with ``crons`` the occurrence ledger's rows of those days.

    "Today" is the injected clock's date; without a clock, the database's
    (never this host's wall clock, read in the middle of the work)."""

    name = "janitor"

    def __init__(
        self,
        store: Store,
        retention_days: int,
        clock: Clock | None = None,
        crons: CronStore | None = None,
    ) -> None:
        self.store = store
        self.retention_days = retention_days
        self.clock = clock
        self.crons = crons

    async def run_once(self, shard: int) -> int:
        today = self.clock.now().date() if self.clock is not None else None
        result = await self.store.maintain_history(
            shard, MaintainHistoryParams(retention_days=self.retention_days, today=today)
        )
        if result.dropped_partitions:
            log.info("dropped history partitions %s", result.dropped_partitions, extra={"shard": shard})
        if self.crons is not None and result.cutoff is not None:
            pruned = await self.prune_occurrences(shard, PruneOccurrencesParams(result.cutoff, PRUNE_BATCH))
            if pruned:
                log.info("pruned %d cron occurrences", pruned, extra={"shard": shard})
        return len(result.dropped_partitions)

    async def prune_occurrences(self, shard: int, params: PruneOccurrencesParams) -> int:
        """The ledger's expired rows, a batch a statement (each its own
        transaction: no long lock on the materializer's table)."""
        assert self.crons is not None
        pruned = 0
        for _ in range(PRUNE_BATCHES):
            n = await self.crons.prune_occurrences(shard, params)
            pruned += n
            if n < params.limit:
                break
        return pruned
