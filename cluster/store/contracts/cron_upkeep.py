"""The materializer's and the janitor's cron contract (STYLE.md item 17)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Protocol

from cluster.model import (
    DueCountsParams,
    DueCron,
    DueCronsParams,
    LastSuccessParams,
    MaterializeBatchParams,
    MaterializeResult,
    PruneOccurrencesParams,
    WaitingCronsParams,
)
from cluster.store.contracts.calendars import CalendarReads
from cluster.store.contracts.readings import CronPending

__all__ = ["CRON_SOON_SECONDS", "CronUpkeep"]

# A cron written due within this many seconds wakes the materializer
# (CronUpkeep.cron_soon; migration 15 has the same figure).
CRON_SOON_SECONDS = 60.0


class CronUpkeep(CronPending, CalendarReads, Protocol):
    """The leader's passes over cron definitions: two leaders at once must be
    harmless (DESIGN.md, invariant 6). A cron's calendar is read from the
    shard's own copy."""

    async def database_now(self, shard: int) -> datetime:
        """The shard's clock (``now()``): the materializer compares its own with it."""
        ...

    def cron_soon(self, shard: int) -> AsyncGenerator[None, None]:
        """Wake-ups for the materializer: yields once when listening begins
        (what came before is not seen), then after each create, change or
        resume that left an enabled, unpaused cron of ``shard`` due within
        :data:`CRON_SOON_SECONDS` (a batch of them may come as one). Ends
        with :class:`~cluster.errors.ShardUnavailable` when the shard's link
        breaks; listen again."""
        ...

    async def due(self, shard: int, params: DueCronsParams) -> list[DueCron]: ...

    async def due_counts(self, shard: int, params: DueCountsParams) -> list[tuple[datetime, int]]:
        """(instant, enabled crons whose next_fire_at is that instant), by
        instant, up to ``params.until``: the size of the waves ahead."""
        ...

    async def waiting_fixed_delay(
        self, shard: int, params: WaitingCronsParams
    ) -> list[DueCron]: ...

    async def materialize(self, shard: int, params: MaterializeBatchParams) -> MaterializeResult:
        """Write many crons' occurrences and move their ``next_fire_at``, in
        one transaction: per cron a compare-and-set, occurrences only for the
        crons that won it, one per (cron_id, scheduled_for) ever."""
        ...

    async def last_successes(
        self, shard: int, params: LastSuccessParams
    ) -> list[tuple[uuid.UUID, datetime]]:
        """Enabled crons and their last success (their creation until one),
        the oldest ``params.limit`` first."""
        ...

    async def prune_occurrences(self, shard: int, params: PruneOccurrencesParams) -> int:
        """Delete a batch of the occurrence ledger's expired rows (see
        :class:`PruneOccurrencesParams`); returns how many went."""
        ...
