"""Cron jobs under ``/api/v1/cron-jobs``: define (one or a batch), list, read,
change, delete, trigger, preview and their runs."""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Query
from pydantic import ValidationError
from starlette.responses import Response

import shardmap
from cluster.api.batches import Results, item_failure, json_response, write_shards
from cluster.api.context import ApiContext, Ctx, Owner
from cluster.api.cron_schemas import (
    BatchCreateCronsIn,
    BatchCreateCronsOut,
    CreateCronIn,
    CronListOut,
    CronOut,
    FireOut,
    PatchCronIn,
    PreviewOut,
    RunOut,
    RunsOut,
    TriggerOut,
)
from cluster.api.openapi import problem_responses
from cluster.api.schemas import parse_rfc3339, target_dict
from cluster.clock import utc
from cluster.cron.plan import cron_slot, first_slot, schedule_of
from cluster.cron.schedule import parse_schedule
from cluster.errors import Conflict, InvalidRequest, NotFound, VakitError
from cluster.model import (
    CronRecord,
    CronRunsParams,
    DeleteCronParams,
    GetCronParams,
    ListCronsParams,
    Occurrence,
    TriggerCronParams,
)

__all__ = ["cron_out", "definition_fingerprint", "load_cron", "router"]

router = APIRouter(tags=["cron-jobs"])
# The Unix epoch anchors fixed-rate schedules: `every 15m` fires at :00, :15, …
_ANCHOR = datetime(1970, 1, 1, tzinfo=UTC)
_DEFINING = (
    "schedule", "time_zone", "type", "target", "payload", "misfire_policy", "concurrency",
    "jitter_seconds", "max_attempts", "timeout_seconds", "starting_deadline_seconds", "enabled",
)  # fmt: skip


# Fields added later count only when set: a cron defined before them keeps
# its fingerprint, so repeating its create is still a 200, not a 409.
_OPTIONAL_DEFAULTS: dict[str, Any] = {
    "month_end_policy": "SKIP", "dst_policy": "CRONIE", "start_at": None, "end_at": None,
    "max_runs": None,
}  # fmt: skip


def definition_fingerprint(values: dict[str, Any]) -> str:
    defining = {k: values[k] for k in _DEFINING}
    for key, default in _OPTIONAL_DEFAULTS.items():
        if values.get(key, default) != default:
            defining[key] = values[key]
    canonical = json.dumps(defining, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def cron_out(c: CronRecord, shard: int) -> CronOut:
    return CronOut(
        cronJobId=c.id_text,
        name=c.name,
        schedule=c.schedule,
        scheduleKind=c.schedule_kind,
        timeZone=c.time_zone,
        type=c.type,
        target=c.target,
        payload=c.payload,
        misfirePolicy=c.misfire_policy,
        concurrency=c.concurrency,
        jitterSeconds=c.jitter_seconds,
        maxAttempts=c.max_attempts,
        timeoutSeconds=c.timeout_seconds,
        startingDeadlineSeconds=c.starting_deadline_seconds,
        enabled=c.enabled,
        monthEndPolicy=c.month_end_policy,
        dstPolicy=c.dst_policy,
        startAt=c.start_at,
        endAt=c.end_at,
        maxRuns=c.max_runs,
        runCount=c.run_count,
        shard=shard,
        nextFireAt=c.next_fire_at,
        lastFireAt=c.last_fire_at,
        lastSuccessAt=c.last_success_at,
        missedCount=c.missed_count,
        skippedCount=c.skipped_count,
        createdAt=c.created_at,
        updatedAt=c.updated_at,
        paused=c.paused_at is not None,
        pausedAt=c.paused_at,
        pauseReason=c.pause_reason,
        lastResult=c.last_result,
        lastResultAt=c.last_result_at,
    )


def _parse_id(ctx: ApiContext, text: str) -> tuple[uuid.UUID, int]:
    try:
        value = shardmap.decode_id("cron", text)
    except ValueError as exc:
        raise NotFound(str(exc)) from exc
    return value, ctx.shards.shard_of(value)


# A batch's first slots, by (expression, zone, policies): its crons share a
# few schedules, and parsing one and finding its next slot was most of a
# cron's cost. Made per batch: `now` is the batch's.
_FirstSlots = dict[tuple[str, str, str, str], tuple[str, datetime | None]]


def _build(
    ctx: ApiContext,
    values: dict[str, Any],
    cron_id: uuid.UUID,
    owner: str,
    name: str,
    now: datetime,
    first_slots: _FirstSlots | None = None,
    *,
    may_end: bool = False,
) -> CronRecord:
    """A definition from its values, checked: target policy, payload size,
    a schedule that parses and fires again (within its bounds, unless
    ``may_end``: a change may end a cron)."""
    ctx.check_target(values["target"], owner)
    ctx.check_payload(values["payload"])
    expression, zone = values["schedule"], values["time_zone"]
    month_end, dst = values["month_end_policy"], values["dst_policy"]
    start_at, end_at = values["start_at"], values["end_at"]
    # Jenkins' H fields read the seed (the cron's id): such a schedule is its
    # own. Any "h" at all is taken for one; a false alarm only costs a parse.
    # Bounds make a cron's first slot its own too.
    shared = (
        first_slots is not None
        and "h" not in expression.lower()
        and start_at is None
        and end_at is None
    )
    key = (expression, zone, month_end, dst)
    known = first_slots.get(key) if first_slots is not None and shared else None
    if known is None:
        schedule = parse_schedule(
            expression,
            zone,
            seed=shardmap.encode_id("cron", cron_id),
            min_interval=timedelta(seconds=ctx.settings.cron_min_interval_seconds),
            anchor=_ANCHOR,
            month_end=month_end,
            dst=dst,
        )
        first_at = first_slot(schedule, now, start_at, end_at)
        if first_at is None and not may_end:
            if end_at is not None:
                raise InvalidRequest(
                    "the schedule has no slot between now (or startAt) and endAt", field="endAt"
                )
            raise InvalidRequest("schedule never fires again", field="schedule")
        known = (schedule.kind, first_at)
        if first_slots is not None and shared:
            first_slots[key] = known
    kind, first = known
    return CronRecord(
        id=cron_id,
        owner=owner,
        name=name,
        schedule=values["schedule"],
        schedule_kind=kind,
        time_zone=values["time_zone"],
        type=values["type"] or name[:64],
        target=values["target"],
        payload=values["payload"],
        misfire_policy=values["misfire_policy"],
        concurrency=values["concurrency"],
        jitter_seconds=values["jitter_seconds"],
        max_attempts=values["max_attempts"],
        timeout_seconds=values["timeout_seconds"],
        starting_deadline_seconds=values["starting_deadline_seconds"],
        enabled=values["enabled"],
        anchor=_ANCHOR,
        next_fire_at=first,
        fingerprint=definition_fingerprint(values),
        month_end_policy=month_end,
        dst_policy=dst,
        start_at=start_at,
        end_at=end_at,
        max_runs=values["max_runs"],
    )


def _values(body: CreateCronIn) -> dict[str, Any]:
    return {
        "schedule": body.schedule.strip(),
        "time_zone": body.timeZone,
        "type": body.type,
        "target": target_dict(body.target),
        "payload": body.payload,
        "misfire_policy": body.misfirePolicy,
        "concurrency": body.concurrency,
        "jitter_seconds": body.jitterSeconds,
        "max_attempts": body.maxAttempts,
        "timeout_seconds": body.timeoutSeconds,
        "starting_deadline_seconds": body.startingDeadlineSeconds,
        "enabled": body.enabled,
        "month_end_policy": body.monthEndPolicy,
        "dst_policy": body.dstPolicy,
        "start_at": _instant(body.startAt),
        "end_at": _instant(body.endAt),
        "max_runs": body.maxRuns,
    }


def _instant(text: str | None) -> datetime | None:
    return None if text is None else utc(parse_rfc3339(text))


def _new_cron(
    ctx: ApiContext, body: CreateCronIn, owner: str, now: datetime, first_slots: _FirstSlots | None = None
) -> tuple[CronRecord, int]:
    """A new definition and its shard: where (owner, name) lives, so the
    per-shard unique name is a global one."""
    slot = cron_slot(owner, body.name)
    cron = _build(ctx, _values(body), shardmap.new_uuid(slot), owner, body.name, now, first_slots)
    return cron, ctx.shards.shard_of_slot(slot)


async def load_cron(ctx: ApiContext, cron_job_id: str, owner: str) -> tuple[CronRecord, int]:
    cron_id, shard = _parse_id(ctx, cron_job_id)
    cron = await ctx.crons.get(shard, GetCronParams(cron_id, owner))
    if cron is None:
        raise NotFound("no such cron job", cron_job_id=cron_job_id)
    return cron, shard


@router.post(
    "/api/v1/cron-jobs",
    status_code=201,
    response_model=CronOut,
    responses={
        200: {"model": CronOut, "description": "The name is defined already, with this definition."},
        **problem_responses(409),
    },
)
async def create_cron(body: CreateCronIn, response: Response, ctx: Ctx, owner: Owner) -> CronOut:
    """Define a cron job. The name is unique per owner; the same name with the
    same definition returns the existing one (200)."""
    cron, shard = _new_cron(ctx, body, owner, ctx.clock.now())
    ctx.limits.admit_crons(owner)
    saved, created = await ctx.crons.create(shard, cron)
    if not created:
        response.status_code = 200
    else:
        ctx.limits.created_crons(owner, 1)
    return cron_out(saved, shard)


@router.post(
    "/api/v1/cron-jobs:batch",
    response_model=BatchCreateCronsOut,
    responses={
        200: {
            "description": "One result per cron, in request order; each succeeds or fails "
            "on its own (201 created, 200 same definition, 409, 413, 422, 503…)."
        }
    },
)
async def create_crons_batch(body: BatchCreateCronsIn, ctx: Ctx, owner: Owner) -> Response:
    """Define up to 1,000 cron jobs, each with its own result, written with one
    statement per shard. Same rules as a single create: the same name with
    the same definition is a 200 repeat, with another definition a 409 (also
    within one batch)."""
    now = ctx.clock.now()
    where = "/api/v1/cron-jobs:batch"
    results: Results = [None] * len(body.cronJobs)
    by_shard: dict[int, list[tuple[int, CronRecord]]] = {}
    first_of: dict[str, tuple[int, CronRecord]] = {}  # name -> its first valid item
    repeats: list[tuple[int, int]] = []  # (index, index of the first with that name)
    first_slots: _FirstSlots = {}
    for index, raw in enumerate(body.cronJobs):
        try:
            cron, shard = _new_cron(ctx, CreateCronIn.model_validate(raw), owner, now, first_slots)
        except (ValidationError, VakitError) as exc:
            results[index] = item_failure(index, exc, where)
            continue
        first = first_of.get(cron.name)
        if first is None:
            first_of[cron.name] = (index, cron)
            by_shard.setdefault(shard, []).append((index, cron))
        elif first[1].fingerprint == cron.fingerprint:
            repeats.append((index, first[0]))
        else:
            conflict = Conflict(
                f"a cron job named {cron.name!r} appears earlier in this batch with a "
                "different definition",
                index=first[0],
            )
            results[index] = item_failure(index, conflict, where)

    def created(index: int, outcome: tuple[CronRecord, bool]) -> dict[str, Any]:
        saved, new = outcome
        return {"index": index, "status": 201 if new else 200, "cronJobId": saved.id_text}

    # All of the batch within the limits, or a 429 for all of it.
    if valid := sum(len(items) for items in by_shard.values()):
        ctx.limits.admit_crons(owner, valid)
    await write_shards(by_shard, ctx.crons.create_many, created, results, where)
    ctx.limits.created_crons(owner, sum(1 for r in results if r is not None and r["status"] == 201))
    for index, first_index in repeats:
        # A name repeated in one batch with the same body: the first's answer,
        # as a repeat (or the first's problem).
        first_result = results[first_index]
        assert first_result is not None
        repeat = {**first_result, "index": index}
        if repeat["status"] in (200, 201):
            repeat["status"] = 200
        results[index] = repeat
    return json_response({"results": results})


@router.get("/api/v1/cron-jobs", response_model=CronListOut)
async def list_crons(
    ctx: Ctx,
    owner: Owner,
    limit: int = Query(50, ge=1, le=500),
    after: str = Query("", max_length=128, description="The nextCursor of the previous page."),
) -> CronListOut:
    """The owner's cron jobs by name, from every shard, a page at a time."""
    page = ListCronsParams(owner, after, limit)
    pages = [await ctx.crons.list_page(s, page) for s in range(ctx.shards.shard_count)]
    merged = list(heapq.merge(*pages, key=lambda c: c.name))[:limit]
    items = [cron_out(c, ctx.shards.shard_of(c.id)) for c in merged]
    more = len(merged) == limit and sum(len(p) for p in pages) > limit
    return CronListOut(items=items, nextCursor=merged[-1].name if more else None)


@router.get("/api/v1/cron-jobs/{cron_job_id}", response_model=CronOut)
async def get_cron(cron_job_id: str, ctx: Ctx, owner: Owner) -> CronOut:
    cron, shard = await load_cron(ctx, cron_job_id, owner)
    return cron_out(cron, shard)


@router.patch(
    "/api/v1/cron-jobs/{cron_job_id}", response_model=CronOut, responses=problem_responses(409)
)
async def patch_cron(cron_job_id: str, body: PatchCronIn, ctx: Ctx, owner: Owner) -> CronOut:
    """Change the definition; applies to occurrences not yet created."""
    cron, shard = await load_cron(ctx, cron_job_id, owner)
    given = body.model_dump(exclude_unset=True)
    values = {
        "schedule": given.get("schedule", cron.schedule).strip(),
        "time_zone": given.get("timeZone", cron.time_zone),
        "type": given.get("type", cron.type),
        "target": given["target"] if "target" in given else cron.target,
        "payload": given["payload"] if "payload" in given else cron.payload,
        "misfire_policy": given.get("misfirePolicy", cron.misfire_policy),
        "concurrency": given.get("concurrency", cron.concurrency),
        "jitter_seconds": given.get("jitterSeconds", cron.jitter_seconds),
        "max_attempts": given.get("maxAttempts", cron.max_attempts),
        "timeout_seconds": given.get("timeoutSeconds", cron.timeout_seconds),
        "starting_deadline_seconds": given.get("startingDeadlineSeconds", cron.starting_deadline_seconds),
        "enabled": given.get("enabled", cron.enabled),
        "month_end_policy": given.get("monthEndPolicy", cron.month_end_policy),
        "dst_policy": given.get("dstPolicy", cron.dst_policy),
        "start_at": _instant(given["startAt"]) if "startAt" in given else cron.start_at,
        "end_at": _instant(given["endAt"]) if "endAt" in given else cron.end_at,
        "max_runs": given.get("maxRuns", cron.max_runs),
    }
    if values["start_at"] and values["end_at"] and values["start_at"] > values["end_at"]:
        raise InvalidRequest("startAt must not be after endAt", field="startAt")
    if "target" in given and body.target is not None:
        values["target"] = target_dict(body.target)
    rebuilt = _build(ctx, values, cron.id, owner, cron.name, ctx.clock.now(), may_end=True)
    timing = (
        "schedule", "timeZone", "enabled", "monthEndPolicy", "dstPolicy", "startAt", "endAt",
        "maxRuns",
    )  # fmt: skip
    if not any(k in given for k in timing) and cron.next_fire_at is not None:
        # Same timing: keep the slot the materializer is at, so no slot is
        # skipped or repeated by an unrelated change.
        rebuilt = dataclasses.replace(rebuilt, next_fire_at=cron.next_fire_at)
    saved = await ctx.crons.update(shard, rebuilt)
    return cron_out(saved, shard)


@router.delete("/api/v1/cron-jobs/{cron_job_id}", status_code=204)
async def delete_cron(cron_job_id: str, ctx: Ctx, owner: Owner) -> Response:
    """Delete the definition; occurrences not yet started are cancelled."""
    cron_id, shard = _parse_id(ctx, cron_job_id)
    await ctx.crons.delete(shard, DeleteCronParams(cron_id, owner))
    return Response(status_code=204)


@router.post(
    "/api/v1/cron-jobs/{cron_job_id}/trigger",
    status_code=201,
    response_model=TriggerOut,
    responses=problem_responses(409),
)
async def trigger_cron(cron_job_id: str, ctx: Ctx, owner: Owner) -> TriggerOut:
    """One extra occurrence now, with its own scheduledFor."""
    cron, shard = await load_cron(ctx, cron_job_id, owner)
    ctx.limits.admit_trigger(cron.id_text)
    now = ctx.clock.now()
    when = now.replace(microsecond=now.microsecond // 1000 * 1000)
    occ = Occurrence(shardmap.new_uuid(shardmap.slot_of(cron.id)), when, when, None)
    if not await ctx.crons.trigger(shard, TriggerCronParams(cron, occ)):
        raise InvalidRequest("an occurrence for this instant exists already; retry")
    return TriggerOut(jobId=shardmap.encode_id("job", occ.job_id), scheduledFor=when)


@router.get("/api/v1/cron-jobs/{cron_job_id}/preview", response_model=PreviewOut)
async def preview_cron(
    cron_job_id: str,
    ctx: Ctx,
    owner: Owner,
    from_: str | None = Query(None, alias="from", description="RFC 3339; default now."),
    count: int = Query(10, ge=1, le=1000),
) -> PreviewOut:
    """The next ``count`` fire instants strictly after ``from``, with DST notes."""
    cron, _ = await load_cron(ctx, cron_job_id, owner)
    start = ctx.clock.now()
    if from_ is not None:
        try:
            start = utc(parse_rfc3339(from_, "from"))
        except ValueError as exc:
            raise InvalidRequest(str(exc), field="from") from exc
    # The bounds shape the preview as they shape the materializer's plan.
    if cron.start_at is not None and cron.start_at > start:
        start = cron.start_at - timedelta(microseconds=1)
    remaining = None if cron.max_runs is None else max(0, cron.max_runs - cron.run_count)
    limit = count if remaining is None else min(count, remaining)
    try:
        fires = list(schedule_of(cron).fires(start, count=limit, until=cron.end_at))
    except (OverflowError, ValueError) as exc:
        # Near the end of the calendar a slot falls past year 9999.
        raise InvalidRequest(
            f"the next {count} fire instants after {from_ or 'now'} are not all before year 10000",
            field="from",
        ) from exc
    end = None
    if len(fires) < count:
        if remaining is not None and len(fires) == remaining:
            end = f"maxRuns {cron.max_runs} reached ({cron.run_count} run so far)"
        elif cron.end_at is not None:
            end = f"endAt {cron.end_at.isoformat()} reached"
    return PreviewOut(
        fires=[FireOut(scheduledFor=f.scheduled_for, local=f.local.isoformat(), note=f.note) for f in fires],
        end=end,
        monthEndPolicy=cron.month_end_policy,
        dstPolicy=cron.dst_policy,
    )


@router.get("/api/v1/cron-jobs/{cron_job_id}/runs", response_model=RunsOut)
async def cron_runs(
    cron_job_id: str, ctx: Ctx, owner: Owner, limit: int = Query(50, ge=1, le=500)
) -> RunsOut:
    """Recent occurrences, newest first, with status, attempts and lateness."""
    cron, shard = await load_cron(ctx, cron_job_id, owner)
    runs = await ctx.crons.runs(shard, CronRunsParams(cron.id, limit))
    return RunsOut(
        runs=[
            RunOut(
                jobId=shardmap.encode_id("job", r.job_id),
                scheduledFor=r.scheduled_for,
                runAt=r.run_at,
                status=r.status,
                attempt=r.attempt,
                lastError=r.last_error,
                finishedAt=r.finished_at,
                latenessSeconds=r.lateness_seconds,
            )
            for r in runs
        ]
    )
