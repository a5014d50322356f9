"""Calendars: create, read, replace, delete and list, on every shard.

Where calendars live. A calendar is a small record (a few hundred dates)
that crons on any shard follow, changed rarely and read by the materializer
on every pass that plans one of its crons. Every shard therefore holds a
copy of every calendar, rather than one home shard holding it:

* the materializer of a shard reads a cron's calendar from its own database,
  in the pass that plans the cron: no pass waits on, or fails with, another
  shard, so a shard that is down stops only its own crons (as today);
* a resharding move (issue 42) moves rows by slot; calendars have none and
  need not move: a shard added later is given every calendar by
  ``vakit shards add`` (:mod:`cluster.store.calendar_copy`), and a cron's
  write carries its calendar to its shard (:func:`carry_calendar`);
* the cost is a write to every shard per change, and calendars change
  seldom.

Copies converge without a coordinator: each version is written to every
shard, and a shard keeps the greatest (version, fingerprint) it was given.
A write that reached only some shards (one was down: the client got a 503)
is completed by repeating it, or by any later write, since every write
sends the latest version to all shards; reads merge the shards' copies and
show the greatest. A deletion is a version (a tombstone), so a late copy of
an older version cannot bring a calendar back.

Deleting a calendar that crons follow is refused (409). The check and a
concurrent cron create on another shard are ordered without a lock: the
delete writes its tombstone first and then looks for crons; a cron's write
stores the cron first and then reads the calendar
(:func:`carry_calendar`). One of the two sees the other: the delete then
restores the calendar and answers 409, or the cron's write is refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from cluster.cron.calendar_rules import check_calendar_name
from cluster.errors import Conflict, InvalidRequest, NotFound
from cluster.model import CalendarBody, CalendarRecord, CronRecord, DeleteCronParams
from cluster.services.calendar_replan import replan_followers
from cluster.services.context import Services

__all__ = [
    "CalendarInUse",
    "calendar_of",
    "carry_calendar",
    "create_calendar",
    "delete_calendar",
    "follow_written",
    "followed",
    "get_calendar",
    "list_calendars",
    "no_calendar",
    "replace_calendar",
    "require_calendar",
    "require_calendars",
]


class CalendarInUse(Conflict):
    """A calendar that crons follow cannot be deleted."""


async def _latest(ctx: Services, owner: str, name: str) -> CalendarRecord | None:
    """The greatest version any shard holds, tombstones included."""
    crons = ctx.crons
    copies = await asyncio.gather(
        *(crons.get_calendar(shard, owner, name) for shard in range(crons.shard_count))
    )
    found = [c for c in copies if c is not None]
    return max(found, key=lambda c: c.order, default=None)


async def _write_everywhere(ctx: Services, record: CalendarRecord) -> CalendarRecord:
    """``record`` on every shard; what the shards hold afterwards, the greatest."""
    crons = ctx.crons
    held = await asyncio.gather(
        *(crons.put_calendar(shard, record) for shard in range(crons.shard_count))
    )
    return max(held, key=lambda c: c.order)


async def create_calendar(
    ctx: Services, owner: str, name: str, body: CalendarBody
) -> tuple[CalendarRecord, bool]:
    """Version 1 (or the next after a deletion); the same body again returns
    the calendar (``False``), another body is a 409."""
    check_calendar_name(name)
    latest = await _latest(ctx, owner, name)
    if latest is not None and not latest.deleted:
        if latest.body.fingerprint != body.fingerprint:
            raise Conflict(
                f"a calendar named {name!r} exists with other days; PUT it to change it",
                name=name,
            )
        # A repeat: it also completes a write that reached only some shards.
        return await _write_everywhere(ctx, latest), False
    version = 1 if latest is None else latest.version + 1
    record = CalendarRecord(owner, name, version, body)
    return await _write_everywhere(ctx, record), True


async def replace_calendar(
    ctx: Services, owner: str, name: str, body: CalendarBody
) -> CalendarRecord:
    """A new version with ``body``; the same body again changes nothing. The
    occurrences its crons have made already are planned again by it
    (:mod:`cluster.services.calendar_replan`)."""
    latest = await _live(ctx, owner, name)
    if latest.body.fingerprint == body.fingerprint:
        return await _write_everywhere(ctx, latest)
    written = await _write_everywhere(ctx, CalendarRecord(owner, name, latest.version + 1, body))
    await replan_followers(ctx, owner, written)
    return written


async def get_calendar(ctx: Services, owner: str, name: str) -> CalendarRecord:
    return await _live(ctx, owner, name)


async def _live(ctx: Services, owner: str, name: str) -> CalendarRecord:
    check_calendar_name(name)
    latest = await _latest(ctx, owner, name)
    if latest is None or latest.deleted:
        raise NotFound(f"no calendar named {name!r}", name=name)
    return latest


async def list_calendars(
    ctx: Services, owner: str, *, after: str = "", limit: int = 100
) -> list[CalendarRecord]:
    """The owner's calendars by name, after ``after``; each shard's copies merged."""
    crons = ctx.crons
    pages = await asyncio.gather(
        *(
            crons.list_calendars(shard, owner, after=after, limit=limit)
            for shard in range(crons.shard_count)
        )
    )
    merged: dict[str, CalendarRecord] = {}
    for page in pages:
        for c in page:
            if c.name not in merged or merged[c.name].order < c.order:
                merged[c.name] = c
    live = [merged[n] for n in sorted(merged) if not merged[n].deleted]
    return live[:limit]


async def _users(ctx: Services, owner: str, name: str) -> list[str]:
    crons = ctx.crons
    found = await asyncio.gather(
        *(crons.crons_on_calendar(shard, owner, name) for shard in range(crons.shard_count))
    )
    return sorted(n for names in found for n in names)


async def delete_calendar(ctx: Services, owner: str, name: str) -> CalendarRecord:
    """A tombstone on every shard; 409 while crons follow the calendar."""
    latest = await _live(ctx, owner, name)
    _refuse_if_used(name, await _users(ctx, owner, name))
    tombstone = dataclasses.replace(latest, version=latest.version + 1, deleted=True)
    written = await _write_everywhere(ctx, tombstone)
    users = await _users(ctx, owner, name)
    if users:
        # A cron was written meanwhile, and may not have seen the tombstone:
        # the calendar comes back (a version of its own).
        restored = dataclasses.replace(latest, version=written.version + 1, deleted=False)
        await _write_everywhere(ctx, restored)
        _refuse_if_used(name, users)
    return written


def _refuse_if_used(name: str, users: Sequence[str]) -> None:
    if users:
        shown = ", ".join(users[:5]) + (" ..." if len(users) > 5 else "")
        raise CalendarInUse(
            f"calendar {name!r} is followed by cron jobs ({shown}); change or delete them first",
            name=name,
            cron_jobs=list(users[:10]),
        )


async def carry_calendar(ctx: Services, owner: str, name: str, shard: int) -> CalendarRecord:
    """The calendar a cron on ``shard`` follows, made sure to be on that shard.

    Called after the cron is written: NotFound when there is no such
    calendar (or it was just deleted), and the caller takes the cron back.
    """
    latest = await _live(ctx, owner, name)
    return await ctx.crons.put_calendar(shard, latest)


def no_calendar(name: str | None) -> InvalidRequest:
    return InvalidRequest(
        f"no calendar named {name!r}: create it first (POST /api/v1/calendars)",
        field="calendar",
    )


async def require_calendar(ctx: Services, owner: str, name: str | None) -> None:
    """A 422 when a cron names a calendar its owner does not have."""
    if name is None:
        return
    try:
        await _live(ctx, owner, name)
    except NotFound as exc:
        raise no_calendar(name) from exc


async def followed(ctx: Services, owner: str, name: str | None, shard: int) -> bool:
    """After a cron that follows ``name`` was written on ``shard``: the
    calendar is carried there; False if it no longer exists."""
    if name is None:
        return True
    try:
        await carry_calendar(ctx, owner, name, shard)
    except NotFound:
        return False
    return True


async def calendar_of(
    ctx: Services, owner: str, name: str | None, shard: int
) -> CalendarRecord | None:
    """The calendar a cron on ``shard`` follows, as that shard holds it (what
    its materializer plans with); the latest if the shard has no copy yet."""
    if name is None:
        return None
    held = await ctx.crons.get_calendar(shard, owner, name)
    if held is not None and not held.deleted:
        return held
    return await _latest(ctx, owner, name)


async def require_calendars(
    ctx: Services,
    owner: str,
    by_shard: dict[int, list[tuple[int, CronRecord]]],
    outcomes: dict[int, tuple[CronRecord, bool] | Exception],
) -> None:
    """A batch's crons whose calendar does not exist get a 422 and are not written."""
    names = {c.calendar for items in by_shard.values() for _, c in items if c.calendar}
    missing: set[str] = set()
    for name in names:
        try:
            await require_calendar(ctx, owner, name)
        except InvalidRequest:
            missing.add(name)
    if not missing:
        return
    for shard, items in by_shard.items():
        kept = []
        for index, cron in items:
            if cron.calendar in missing:
                outcomes[index] = no_calendar(cron.calendar)
            else:
                kept.append((index, cron))
        by_shard[shard] = kept


async def follow_written(
    ctx: Services,
    owner: str,
    by_shard: dict[int, list[tuple[int, CronRecord]]],
    outcomes: dict[int, tuple[CronRecord, bool] | Exception],
) -> None:
    """After a batch's write: each calendar carried to the shards of its crons;
    the crons of one deleted meanwhile are taken back and get a 422."""
    for shard, items in by_shard.items():
        written = [
            (index, result)
            for index, _ in items
            if isinstance(result := outcomes.get(index), tuple) and result[0].calendar
        ]
        for name in {r[0].calendar for _, r in written}:
            if await followed(ctx, owner, name, shard):
                continue
            for index, (cron, created) in written:
                if cron.calendar == name:
                    if created:
                        await ctx.crons.delete(shard, DeleteCronParams(cron.id, owner))
                    outcomes[index] = no_calendar(name)
