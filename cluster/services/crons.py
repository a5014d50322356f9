"""Cron jobs: define (one or a batch), list, read, change, delete, trigger,
preview and their runs.

A definition is built once, by :func:`cluster.cron.definition.build_cron`,
after the checks only a deployment can make (target policy, payload size,
the operator's minimum interval). A cron lives on the shard of its
(owner, name), so the per-shard unique name is a global one.
"""

from __future__ import annotations

import dataclasses
import heapq
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import shardmap
from cluster.cron.definition import FirstSlots, build_cron
from cluster.cron.firing import Fire
from cluster.cron.plan import cron_slot, schedule_of
from cluster.errors import Conflict, InvalidRequest, NotFound, VakitError
from cluster.instants import parse_instant, utc
from cluster.model import (
    TIMING_FIELDS,
    CronDefinition,
    CronRecord,
    CronRun,
    CronRunsParams,
    DeleteCronParams,
    GetCronParams,
    ListCronsParams,
    Occurrence,
    TriggerCronParams,
)
from cluster.services import calendars as calendar_service
from cluster.services.batches import write_by_shard
from cluster.services.calendar_replan import replan_changed
from cluster.services.context import Services
from cluster.services.routing import on_owner, owner_and

__all__ = [
    "BatchOutcomes",
    "Preview",
    "change_cron",
    "cron_runs",
    "define_cron",
    "define_crons",
    "delete_cron",
    "list_crons",
    "load_cron",
    "new_cron",
    "parse_cron_id",
    "preview_cron",
    "trigger_cron",
]


def parse_cron_id(ctx: Services, text: str) -> tuple[uuid.UUID, int]:
    """A cron's id from its text, and its shard; 404 for a malformed one."""
    try:
        value = shardmap.decode_id("cron", text)
    except ValueError as exc:
        raise NotFound(str(exc)) from exc
    return value, ctx.shards.shard_of(value)


async def load_cron(ctx: Services, owner: str, cron_job_id: str) -> tuple[CronRecord, int]:
    cron_id, shard = parse_cron_id(ctx, cron_job_id)
    cron = await ctx.crons.get(shard, GetCronParams(cron_id, owner))
    if cron is None:
        raise NotFound("no such cron job", cron_job_id=cron_job_id)
    return cron, shard


def _build(
    ctx: Services,
    definition: CronDefinition,
    cron_id: uuid.UUID,
    owner: str,
    now: datetime,
    first_slots: FirstSlots | None = None,
    *,
    may_end: bool = False,
) -> CronRecord:
    """The deployment's checks (target policy, payload size), then the builder's."""
    ctx.check_target(definition.target, owner)
    ctx.check_payload(definition.payload)
    return build_cron(
        definition,
        cron_id=cron_id,
        owner=owner,
        now=now,
        min_interval=timedelta(seconds=ctx.settings.cron_min_interval_seconds),
        first_slots=first_slots,
        may_end=may_end,
    )


def new_cron(
    ctx: Services,
    owner: str,
    definition: CronDefinition,
    now: datetime,
    first_slots: FirstSlots | None = None,
) -> tuple[CronRecord, int]:
    """A new cron's record and its shard: where (owner, name) lives, so the
    per-shard unique name is a global one."""
    slot = cron_slot(owner, definition.name)
    cron = _build(ctx, definition, shardmap.new_uuid(slot), owner, now, first_slots)
    return cron, ctx.shards.shard_of_slot(slot)


async def define_cron(
    ctx: Services, owner: str, definition: CronDefinition
) -> tuple[CronRecord, int, bool]:
    """Define a cron job: the saved record, its shard, and whether it was
    created (False: the name is defined already with this definition)."""
    cron, shard = new_cron(ctx, owner, definition, ctx.clock.now())
    await calendar_service.require_calendar(ctx, owner, cron.calendar)
    ctx.limits.admit_crons(owner)
    (saved, created), shard = await owner_and(ctx, cron.id, lambda at: ctx.crons.create(at, cron))
    if not await calendar_service.followed(ctx, owner, saved.calendar, shard):
        # Its calendar was deleted between the check and the write.
        if created:
            await ctx.crons.delete(shard, DeleteCronParams(saved.id, owner))
        raise calendar_service.no_calendar(saved.calendar)
    if created:
        ctx.limits.created_crons(owner, 1)
    return saved, shard, created


@dataclass
class BatchOutcomes:
    """A batch's outcome by index: the saved record and whether it was
    created, or the item's error; ``repeats`` pairs an item with the first
    of its name in the batch, whose answer it repeats."""

    outcomes: dict[int, tuple[CronRecord, bool] | Exception]
    repeats: list[tuple[int, int]]


async def define_crons(
    ctx: Services, owner: str, items: Sequence[tuple[int, CronDefinition]]
) -> BatchOutcomes:
    """Define many crons (``(index, definition)`` pairs), written with one
    statement per shard. Same rules as a single create: the same name with
    the same definition is a repeat, with another a conflict (also within
    one batch). All of the batch within the owner's limits, or none."""
    now = ctx.clock.now()
    outcomes: dict[int, tuple[CronRecord, bool] | Exception] = {}
    by_shard: dict[int, list[tuple[int, CronRecord]]] = {}
    first_of: dict[str, tuple[int, CronRecord]] = {}  # name -> its first valid item
    repeats: list[tuple[int, int]] = []
    first_slots: FirstSlots = {}
    for index, definition in items:
        try:
            cron, shard = new_cron(ctx, owner, definition, now, first_slots)
        except VakitError as exc:
            outcomes[index] = exc
            continue
        first = first_of.get(cron.name)
        if first is None:
            first_of[cron.name] = (index, cron)
            by_shard.setdefault(shard, []).append((index, cron))
        elif first[1].fingerprint == cron.fingerprint:
            repeats.append((index, first[0]))
        else:
            outcomes[index] = Conflict(
                f"a cron job named {cron.name!r} appears earlier in this batch with a "
                "different definition",
                index=first[0],
            )
    await calendar_service.require_calendars(ctx, owner, by_shard, outcomes)
    if valid := sum(len(items) for items in by_shard.values()):
        ctx.limits.admit_crons(owner, valid)
    outcomes.update(await write_by_shard(by_shard, ctx.crons.create_many))
    await calendar_service.follow_written(ctx, owner, by_shard, outcomes)
    created = sum(1 for o in outcomes.values() if isinstance(o, tuple) and o[1])
    ctx.limits.created_crons(owner, created)
    return BatchOutcomes(outcomes, repeats)


async def list_crons(
    ctx: Services, owner: str, after: str, limit: int
) -> tuple[list[tuple[CronRecord, int]], str | None]:
    """The owner's crons by name, from every shard, a page at a time (each
    with its shard), and the cursor of the next page."""
    page = ListCronsParams(owner, after, limit)
    pages = [await ctx.crons.list_page(s, page) for s in range(ctx.shards.shard_count)]
    merged = list(heapq.merge(*pages, key=lambda c: c.name))[:limit]
    more = len(merged) == limit and sum(len(p) for p in pages) > limit
    return [(c, ctx.shards.shard_of(c.id)) for c in merged], merged[-1].name if more else None


async def change_cron(
    ctx: Services, owner: str, cron_job_id: str, changes: dict[str, Any]
) -> tuple[CronRecord, int]:
    """Change a definition (``changes`` by :class:`CronDefinition` field);
    applies to occurrences not yet created. A change may end a cron."""
    cron, _ = await load_cron(ctx, owner, cron_job_id)
    if (
        changes.get("calendar", cron.calendar) is None
        and cron.calendar_policy is not None
        and "calendar_policy" not in changes
    ):
        changes = {**changes, "calendar_policy": None}  # no calendar, no policy
    definition = cron.definition._replace(**changes)
    start, end = definition.start_at, definition.end_at
    if start and end and start > end:
        raise InvalidRequest("startAt must not be after endAt", field="startAt")
    rebuilt = _build(ctx, definition, cron.id, owner, ctx.clock.now(), may_end=True)
    await calendar_service.require_calendar(ctx, owner, rebuilt.calendar)
    if not any(k in changes for k in TIMING_FIELDS) and cron.next_fire_at is not None:
        # Same timing: keep the slot the materializer is at, so no slot is
        # skipped or repeated by an unrelated change.
        rebuilt = dataclasses.replace(rebuilt, next_fire_at=cron.next_fire_at)
    saved, shard = await owner_and(ctx, cron.id, lambda at: ctx.crons.update(at, rebuilt))
    if not await calendar_service.followed(ctx, owner, saved.calendar, shard):
        # Deleted between the check and the write: the change is taken back.
        await ctx.crons.update(shard, dataclasses.replace(cron, updated_at=None))
        raise calendar_service.no_calendar(saved.calendar)
    if (cron.calendar or saved.calendar) and any(k in changes for k in TIMING_FIELDS):
        # A calendar's moved runs may be days away: plan them again now.
        await replan_changed(ctx, shard, saved)
    return saved, shard


async def delete_cron(ctx: Services, owner: str, cron_job_id: str) -> None:
    """Delete the definition; occurrences not yet started are cancelled."""
    cron_id, _ = parse_cron_id(ctx, cron_job_id)
    params = DeleteCronParams(cron_id, owner)
    await on_owner(ctx, cron_id, lambda at: ctx.crons.delete(at, params))


async def trigger_cron(ctx: Services, owner: str, cron_job_id: str) -> Occurrence:
    """One extra occurrence now, with its own scheduled time (milliseconds)."""
    cron, shard = await load_cron(ctx, owner, cron_job_id)
    ctx.limits.admit_trigger(cron.id_text)
    now = ctx.clock.now()
    when = now.replace(microsecond=now.microsecond // 1000 * 1000)
    occ = Occurrence(shardmap.new_uuid(shardmap.slot_of(cron.id)), when, when, None)
    if not await ctx.crons.trigger(shard, TriggerCronParams(cron, occ)):
        raise InvalidRequest("an occurrence for this instant exists already; retry")
    return occ


@dataclass(frozen=True)
class Preview:
    """A cron's next fires, and why fewer than asked (``end``)."""

    cron: CronRecord
    fires: list[Fire]
    end: str | None
    calendar_version: int | None = None  # of the calendar the fires were computed with


async def preview_cron(
    ctx: Services, owner: str, cron_job_id: str, start_text: str | None, count: int
) -> Preview:
    """The next ``count`` fire instants strictly after ``start_text`` (RFC
    3339; None: now), within the cron's bounds, with DST notes."""
    cron, shard = await load_cron(ctx, owner, cron_job_id)
    calendar = await calendar_service.calendar_of(ctx, owner, cron.calendar, shard)
    after = ctx.clock.now()
    if start_text is not None:
        try:
            after = utc(parse_instant(start_text, "from"))
        except ValueError as exc:
            raise InvalidRequest(str(exc), field="from") from exc
    # The bounds shape the preview as they shape the materializer's plan.
    if cron.start_at is not None and cron.start_at > after:
        after = cron.start_at - timedelta(microseconds=1)
    remaining = None if cron.max_runs is None else max(0, cron.max_runs - cron.run_count)
    limit = count if remaining is None else min(count, remaining)
    try:
        schedule = schedule_of(cron, calendar=calendar)
        fires = list(schedule.fires(after, count=limit, until=cron.end_at))
    except (OverflowError, ValueError) as exc:
        # Near the end of the calendar a slot falls past year 9999.
        raise InvalidRequest(
            f"the next {count} fire instants after {start_text or 'now'} are not all before "
            "year 10000",
            field="from",
        ) from exc
    end = None
    if len(fires) < count:
        if remaining is not None and len(fires) == remaining:
            end = f"maxRuns {cron.max_runs} reached ({cron.run_count} run so far)"
        elif cron.end_at is not None:
            end = f"endAt {cron.end_at.isoformat()} reached"
    return Preview(cron, fires, end, calendar.version if calendar is not None else None)


async def cron_runs(ctx: Services, owner: str, cron_job_id: str, limit: int) -> list[CronRun]:
    """Recent occurrences, newest first."""
    cron, shard = await load_cron(ctx, owner, cron_job_id)
    return await ctx.crons.runs(shard, CronRunsParams(cron.id, limit))
