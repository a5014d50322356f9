"""The lease reaper: RUNNING jobs whose lease ran out go back to SCHEDULED (or FAILED)."""

from __future__ import annotations

import logging

from cluster import metrics
from cluster.model import ReapParams
from cluster.store.contracts.upkeep import JobUpkeep

__all__ = ["Reaper"]

log = logging.getLogger(__name__)


class Reaper:
    """RUNNING jobs whose lease ran out go back to SCHEDULED (or FAILED)."""

    name = "reaper"

    def __init__(
        self, store: JobUpkeep, batch: int = 1000, owners: frozenset[str] = frozenset()
    ) -> None:
        self.store = store
        self.batch = batch
        # The owners the dead-letter metric names (the configured tenants), as
        # the worker's completer does; any other is 'other'.
        self.owners = owners

    async def run_once(self, shard: int) -> int:
        total = 0
        while True:
            result = await self.store.reap_expired(shard, ReapParams(limit=self.batch))
            n = result.rescheduled + result.failed
            if n:
                metrics.LEASE_EXPIRED.labels(str(shard)).inc(n)
                log.warning(
                    "leases expired: %d rescheduled, %d failed",
                    result.rescheduled,
                    result.failed,
                    extra={"shard": shard},
                )
            for owner, kind, failed in result.failed_by:
                # A job whose last attempt's lease ran out is a dead letter too.
                label = owner if owner in self.owners else "other"
                metrics.FAILED.labels(str(shard), kind, label).inc(failed)
            total += n
            if n < self.batch:
                return total
