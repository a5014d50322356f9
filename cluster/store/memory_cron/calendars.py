"""Each shard's copy of the calendars, in memory: the rules of
:mod:`cluster.store.postgres_cron.calendars` (a copy moves only forward)."""

from __future__ import annotations

import dataclasses
import uuid

from cluster.model import CalendarRecord
from cluster.store.memory_cron.crons import MemCronShards

__all__ = ["MemCalendars"]


class MemCalendars(MemCronShards):
    """:class:`~cluster.store.contracts.calendars.CalendarIntake` in memory."""

    async def put_calendar(self, shard: int, calendar: CalendarRecord) -> CalendarRecord:
        held = self._c(shard).calendars
        key = (calendar.owner, calendar.name)
        old = held.get(key)
        if old is not None and old.order >= calendar.order:
            return old
        now = self._now()
        created = now if old is None or old.deleted else old.created_at
        new = dataclasses.replace(calendar, created_at=created, updated_at=now)
        held[key] = new
        return new

    async def get_calendar(self, shard: int, owner: str, name: str) -> CalendarRecord | None:
        return self._c(shard).calendars.get((owner, name))

    async def list_calendars(
        self, shard: int, owner: str, *, after: str = "", limit: int = 500
    ) -> list[CalendarRecord]:
        held = self._c(shard).calendars
        names = sorted(n for o, n in held if o == owner and n > after)
        return [held[(owner, n)] for n in names[:limit]]

    async def hold_calendar_version(
        self, shard: int, cron_id: uuid.UUID, name: str, version: int
    ) -> None:
        held = self._c(shard).held_versions
        async with self.store._lock:
            old = held.get(cron_id)
            if old is not None and old[0] == name:
                version = max(version, old[1])
            held[cron_id] = (name, version)
            self._c(shard).settled_next.pop(cron_id, None)

    async def crons_on_calendar(
        self, shard: int, owner: str, name: str, *, limit: int = 10
    ) -> list[str]:
        crons = self._c(shard).by_id.values()
        return sorted(c.name for c in crons if c.owner == owner and c.calendar == name)[:limit]
