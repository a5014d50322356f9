"""The API's cron contract: definitions and their actions (STYLE.md item 17)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cluster.errors import Conflict
from cluster.model import (
    BackfillParams,
    BackfillResult,
    CronRecord,
    CronRun,
    CronRunsParams,
    DeleteCronParams,
    GetCronParams,
    ListCronsParams,
    OwnerCountsParams,
    PauseCronParams,
    ResumeCronParams,
    TriggerCronParams,
)
from cluster.store.contracts.calendars import CalendarIntake
from cluster.store.contracts.readings import CronPending

__all__ = ["CronIntake"]


class CronIntake(CronPending, CalendarIntake, Protocol):
    """Create, read and change one owner's cron jobs (and the calendars they
    follow). A cron's occurrences are jobs of the same shard: read them
    through the job contracts.
    Implementations raise only :mod:`cluster.errors` exceptions."""

    async def create(self, shard: int, cron: CronRecord) -> tuple[CronRecord, bool]:
        """Insert; the same name with the same fingerprint returns the existing
        definition (``False``); the same name with another body raises
        :class:`~cluster.errors.Conflict`."""
        ...

    async def create_many(
        self, shard: int, crons: Sequence[CronRecord]
    ) -> list[tuple[CronRecord, bool] | Conflict]:
        """:meth:`create` for many crons with one statement: one result per
        cron, in order, a Conflict in the slot of a name reused with another
        body. Never all-or-nothing. Names must be distinct within a call."""
        ...

    async def get(self, shard: int, params: GetCronParams) -> CronRecord | None: ...

    async def list_page(self, shard: int, params: ListCronsParams) -> list[CronRecord]:
        """The owner's crons on this shard by name, after ``params.after``."""
        ...

    async def update(self, shard: int, cron: CronRecord) -> CronRecord:
        """Replace the definition (matched by id and owner); NotFound if absent."""
        ...

    async def delete(self, shard: int, params: DeleteCronParams) -> int:
        """Delete the definition and cancel its occurrences not yet started;
        returns how many were cancelled. NotFound if absent."""
        ...

    async def trigger(self, shard: int, params: TriggerCronParams) -> bool:
        """One extra occurrence; False if that instant has one already.
        Conflict when FORBID and an occurrence is pending or running."""
        ...

    async def runs(self, shard: int, params: CronRunsParams) -> list[CronRun]:
        """Recent occurrences (pending, far, finished), newest slot first."""
        ...

    async def pause(self, shard: int, params: PauseCronParams) -> CronRecord:
        """No slot is materialized while paused; occurrences not yet due are
        withdrawn and ``next_fire_at`` goes back to the earliest of them.
        Pausing again only changes the reason. NotFound if absent."""
        ...

    async def resume(self, shard: int, params: ResumeCronParams) -> CronRecord:
        """Slots are materialized again; those that passed while paused are
        late, and the misfire policy decides (as after an outage)."""
        ...

    async def backfill(self, shard: int, params: BackfillParams) -> BackfillResult:
        """Occurrences of past slots, each once by (cron_id, scheduled_for):
        a slot that has one already is reported (``exists``), or with
        ``rerun`` a finished one is revived with a new attempt series.
        ``dry_run`` writes nothing. NotFound if the cron is absent."""
        ...

    async def crons_by_owner(self, shard: int, params: OwnerCountsParams) -> dict[str, int]:
        """Cron jobs defined per owner: the ``params.limit`` owners with the
        most (the API's per-owner quota)."""
        ...
