"""The calendar contract: one shard's copy of each owner's calendars (issue 45).

Every shard holds a copy of every calendar; the service
(:mod:`cluster.services.calendars`) writes each version to every shard and
merges what the shards hold. A shard's copy only ever moves forward: a write
replaces it only with a greater (version, fingerprint).
"""

from __future__ import annotations

import uuid
from typing import Protocol

from cluster.model import CalendarRecord

__all__ = ["CalendarIntake", "CalendarReads"]


class CalendarReads(Protocol):
    """What the materializer reads of calendars (its shard's copies)."""

    async def get_calendar(self, shard: int, owner: str, name: str) -> CalendarRecord | None:
        """This shard's copy, a tombstone (``deleted``) included; None if it has none."""
        ...


class CalendarIntake(CalendarReads, Protocol):
    """The API's calendar writes and reads, shard by shard.
    Implementations raise only :mod:`cluster.errors` exceptions."""

    async def put_calendar(self, shard: int, calendar: CalendarRecord) -> CalendarRecord:
        """Write this version unless the shard holds a greater (version,
        fingerprint); return what the shard holds afterwards."""
        ...

    async def list_calendars(
        self, shard: int, owner: str, *, after: str = "", limit: int = 500
    ) -> list[CalendarRecord]:
        """The owner's calendars on this shard by name after ``after``, tombstones included."""
        ...

    async def hold_calendar_version(
        self, shard: int, cron_id: uuid.UUID, name: str, version: int
    ) -> None:
        """A change to calendar ``name`` is about to re-plan the cron by
        ``version``: from now on a materializer write planned by an older
        version of it loses its compare-and-set (it writes nothing)."""
        ...

    async def crons_on_calendar(
        self, shard: int, owner: str, name: str, *, limit: int = 10
    ) -> list[str]:
        """Names of the owner's crons on this shard that follow the calendar."""
        ...
