"""The history janitor: day partitions made ahead of time, expired days
dropped, and the cron occurrence ledger pruned of the same days."""

from __future__ import annotations

import logging
from datetime import datetime

from cluster.clock import Clock
from cluster.model import MaintainHistoryParams, PruneOccurrencesParams
from cluster.store.contracts.cron_upkeep import CronUpkeep
from cluster.store.contracts.upkeep import JobUpkeep

__all__ = ["Janitor"]

log = logging.getLogger(__name__)


class Janitor:
    """Day partitions of history ahead of time; expired days dropped, and
    with ``crons`` the occurrence ledger's rows of those days. Expired keys
    and ledger rows go ``batch`` a statement, at most ``batches``
    statements each a pass: five million an hour, where 20,000 minutely
    crons make 1.2 million ledger rows.

    "Today" is the injected clock's date; without a clock, the database's
    (never this host's wall clock, read in the middle of the work)."""

    name = "janitor"

    def __init__(
        self,
        store: JobUpkeep,
        retention_days: int,
        clock: Clock | None = None,
        crons: CronUpkeep | None = None,
        batch: int = 10_000,
        batches: int = 500,
    ) -> None:
        self.store = store
        self.retention_days = retention_days
        self.clock = clock
        self.crons = crons
        self.batch = batch
        self.batches = batches

    async def run_once(self, shard: int) -> int:
        today = self.clock.now().date() if self.clock is not None else None
        result = await self.store.maintain_history(
            shard,
            MaintainHistoryParams(
                retention_days=self.retention_days,
                today=today,
                batch=self.batch,
                batches=self.batches,
            ),
        )
        if result.dropped_partitions:
            log.info(
                "dropped history partitions %s", result.dropped_partitions, extra={"shard": shard}
            )
        if self.crons is not None and result.cutoff is not None:
            pruned = await self._prune_occurrences(self.crons, shard, result.cutoff)
            if pruned:
                log.info("pruned %d cron occurrences", pruned, extra={"shard": shard})
        return len(result.dropped_partitions)

    async def _prune_occurrences(self, crons: CronUpkeep, shard: int, cutoff: datetime) -> int:
        """The ledger's expired rows, a batch a statement (each its own
        transaction: no long lock on the materializer's table)."""
        params = PruneOccurrencesParams(cutoff, self.batch)
        pruned = 0
        for _ in range(self.batches):
            n = await crons.prune_occurrences(shard, params)
            pruned += n
            if n < params.limit:
                break
        return pruned
