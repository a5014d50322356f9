"""Each shard's copy of the calendars, on PostgreSQL (migration 23)."""

from __future__ import annotations

import uuid
from typing import Any

from cluster.model import CalendarBody, CalendarRecord
from cluster.store.pgshards import wrap_exceptions
from cluster.store.postgres_cron.pools import PgCronPools
from cluster.store.sql import QUERIES

__all__ = ["PgCalendars", "calendar_row"]


def calendar_row(row: dict[str, Any]) -> CalendarRecord:
    return CalendarRecord(
        owner=row["owner_service"],
        name=row["name"],
        version=int(row["version"]),
        body=CalendarBody(
            time_zone=row["time_zone"],
            exclude_dates=tuple(sorted(row["exclude_dates"])),
            include_dates=tuple(sorted(row["include_dates"])),
            business_week=frozenset(int(d) for d in row["business_week"]),
            description=row["description"],
        ),
        deleted=bool(row["deleted"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


class PgCalendars(PgCronPools):
    """:class:`~cluster.store.contracts.calendars.CalendarIntake` on PostgreSQL."""

    @wrap_exceptions
    async def put_calendar(self, shard: int, calendar: CalendarRecord) -> CalendarRecord:
        body = calendar.body
        args = {
            "owner": calendar.owner,
            "name": calendar.name,
            "version": calendar.version,
            "fingerprint": body.fingerprint,
            "time_zone": body.time_zone,
            "exclude_dates": list(body.exclude_dates),
            "include_dates": list(body.include_dates),
            "business_week": sorted(body.business_week),
            "description": body.description,
            "deleted": calendar.deleted,
            "now": None,
        }
        [row] = await self._rows(shard, "put_calendar", args)
        return calendar_row(row)

    @wrap_exceptions
    async def get_calendar(self, shard: int, owner: str, name: str) -> CalendarRecord | None:
        rows = await self._rows(shard, "get_calendar", {"owner": owner, "name": name})
        return calendar_row(rows[0]) if rows else None

    @wrap_exceptions
    async def list_calendars(
        self, shard: int, owner: str, *, after: str = "", limit: int = 500
    ) -> list[CalendarRecord]:
        args = {"owner": owner, "after": after, "limit": limit}
        return [calendar_row(r) for r in await self._rows(shard, "list_calendars", args)]

    @wrap_exceptions
    async def hold_calendar_version(
        self, shard: int, cron_id: uuid.UUID, name: str, version: int
    ) -> None:
        args = {"id": cron_id, "name": name, "version": version}
        async with self.store.connection(shard) as conn:
            await conn.execute(QUERIES["hold_calendar_version"], args)

    @wrap_exceptions
    async def crons_on_calendar(
        self, shard: int, owner: str, name: str, *, limit: int = 10
    ) -> list[str]:
        args = {"owner": owner, "name": name, "limit": limit}
        return [r["name"] for r in await self._rows(shard, "crons_on_calendar", args)]
