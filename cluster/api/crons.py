"""Cron jobs under ``/api/v1/cron-jobs``: define (one or a batch), list, read,
change, delete, trigger, preview and their runs. The routes translate HTTP;
the rules are the service's (:mod:`cluster.services.crons`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from pydantic import ValidationError
from starlette.responses import Response

import shardmap
from cluster.api.batches import Results, fill_results, item_failure, json_response
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
from cluster.api.schemas import target_dict
from cluster.instants import INSTANT_PATTERN
from cluster.model import CronDefinition, CronRecord, CronRun
from cluster.services import crons as cron_service
from cluster.services.cron_document import DOCUMENT_FIELDS, definition_of, instant
from cluster.services.crons import Preview

__all__ = ["cron_out", "load_cron", "preview_out", "router", "runs_out"]

router = APIRouter(tags=["cron-jobs"])


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
        calendar=c.calendar,
        calendarPolicy=c.calendar_policy,
    )


async def load_cron(ctx: ApiContext, cron_job_id: str, owner: str) -> tuple[CronRecord, int]:
    return await cron_service.load_cron(ctx, owner, cron_job_id)


@router.post(
    "/api/v1/cron-jobs",
    status_code=201,
    response_model=CronOut,
    responses={
        200: {
            "model": CronOut,
            "description": "The name is defined already, with this definition.",
        },
        **problem_responses(409),
    },
)
async def create_cron(body: CreateCronIn, response: Response, ctx: Ctx, owner: Owner) -> CronOut:
    """Define a cron job. The name is unique per owner; the same name with the
    same definition returns the existing one (200)."""
    saved, shard, created = await cron_service.define_cron(ctx, owner, definition_of(body))
    if not created:
        response.status_code = 200
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
    where = "/api/v1/cron-jobs:batch"
    results: Results = [None] * len(body.cronJobs)
    valid: list[tuple[int, CronDefinition]] = []
    for index, raw in enumerate(body.cronJobs):
        try:
            valid.append((index, definition_of(CreateCronIn.model_validate(raw))))
        except ValidationError as exc:
            results[index] = item_failure(index, exc, where)
    batch = await cron_service.define_crons(ctx, owner, valid)

    def created(index: int, outcome: tuple[CronRecord, bool]) -> dict[str, Any]:
        saved, new = outcome
        return {"index": index, "status": 201 if new else 200, "cronJobId": saved.id_text}

    fill_results(batch.outcomes, created, results, where)
    for index, first_index in batch.repeats:
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
    page, cursor = await cron_service.list_crons(ctx, owner, after, limit)
    return CronListOut(items=[cron_out(c, shard) for c, shard in page], nextCursor=cursor)


@router.get("/api/v1/cron-jobs/{cron_job_id}", response_model=CronOut)
async def get_cron(cron_job_id: str, ctx: Ctx, owner: Owner) -> CronOut:
    cron, shard = await load_cron(ctx, cron_job_id, owner)
    return cron_out(cron, shard)


@router.patch(
    "/api/v1/cron-jobs/{cron_job_id}", response_model=CronOut, responses=problem_responses(409)
)
async def patch_cron(cron_job_id: str, body: PatchCronIn, ctx: Ctx, owner: Owner) -> CronOut:
    """Change the definition; applies to occurrences not yet created."""
    return cron_out(*await cron_service.change_cron(ctx, owner, cron_job_id, _changes(body)))


# A change's fields by their names in the definition.
_PATCHED = {name: attr for attr, name in DOCUMENT_FIELDS.items()}


def _changes(body: PatchCronIn) -> dict[str, Any]:
    """The fields a PATCH sets (absent: kept), as definition values."""
    changes: dict[str, Any] = {}
    for name in body.model_fields_set:
        value = getattr(body, name)
        if name == "schedule":
            value = value.strip()
        elif name == "target":
            value = target_dict(value)
        elif name in ("startAt", "endAt"):
            value = instant(value)
        changes[_PATCHED[name]] = value
    return changes


@router.delete("/api/v1/cron-jobs/{cron_job_id}", status_code=204)
async def delete_cron(cron_job_id: str, ctx: Ctx, owner: Owner) -> Response:
    """Delete the definition; occurrences not yet started are cancelled."""
    await cron_service.delete_cron(ctx, owner, cron_job_id)
    return Response(status_code=204)


@router.post(
    "/api/v1/cron-jobs/{cron_job_id}/trigger",
    status_code=201,
    response_model=TriggerOut,
    responses=problem_responses(409),
)
async def trigger_cron(cron_job_id: str, ctx: Ctx, owner: Owner) -> TriggerOut:
    """One extra occurrence now, with its own scheduledFor."""
    occ = await cron_service.trigger_cron(ctx, owner, cron_job_id)
    return TriggerOut(jobId=shardmap.encode_id("job", occ.job_id), scheduledFor=occ.scheduled_for)


@router.get("/api/v1/cron-jobs/{cron_job_id}/preview", response_model=PreviewOut)
async def preview_cron(
    cron_job_id: str,
    ctx: Ctx,
    owner: Owner,
    from_: str | None = Query(
        None, alias="from", pattern=INSTANT_PATTERN, description="RFC 3339; default now."
    ),
    count: int = Query(10, ge=1, le=1000),
) -> PreviewOut:
    """The next ``count`` fire instants strictly after ``from``, with DST notes."""
    preview = await cron_service.preview_cron(ctx, owner, cron_job_id, from_, count)
    return preview_out(preview)


def preview_out(preview: Preview) -> PreviewOut:
    return PreviewOut(
        fires=[
            FireOut(
                scheduledFor=f.scheduled_for,
                local=f.local.isoformat(),
                note=f.note,
                runAt=f.moved_to,
            )
            for f in preview.fires
        ],
        end=preview.end,
        monthEndPolicy=preview.cron.month_end_policy,
        dstPolicy=preview.cron.dst_policy,
        calendar=preview.cron.calendar,
        calendarVersion=preview.calendar_version,
    )


@router.get("/api/v1/cron-jobs/{cron_job_id}/runs", response_model=RunsOut)
async def cron_runs(
    cron_job_id: str, ctx: Ctx, owner: Owner, limit: int = Query(50, ge=1, le=500)
) -> RunsOut:
    """Recent occurrences, newest first, with status, attempts and lateness."""
    return runs_out(await cron_service.cron_runs(ctx, owner, cron_job_id, limit))


def runs_out(runs: list[CronRun]) -> RunsOut:
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
