"""What operators do with jobs: search, retry, bulk retry and cancel, pause
and resume (``/api/v1/jobs…``).

A search reads every shard at once and merges the pages newest first, by
job id: ids are UUIDv7, so the order is the jobs' creation order on every
shard, and it never changes while a job moves from the far table to the
hot one and to history. The cursor is the last id of a page: the next page
is every shard's ids below it, which stays exact however jobs move or
finish in between. A shard that cannot be read is named in
``missingShards``; the others still answer.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime

from fastapi import APIRouter, Query

import shardmap
from cluster.api.context import ApiContext, Ctx, Owner
from cluster.api.jobs import job_id_text, job_out, parse_job_id
from cluster.api.operator_schemas import (
    BulkFailure,
    BulkJobsIn,
    BulkJobsOut,
    JobPageOut,
    PauseIn,
    problems,
)
from cluster.api.problems import kind_of
from cluster.api.schemas import JobOut, parse_rfc3339
from cluster.clock import utc
from cluster.errors import InvalidRequest, ShardUnavailable, VakitError
from cluster.model import (
    RETRYABLE,
    CancelParams,
    JobRecord,
    JobSearchParams,
    JobStatus,
    PauseJobParams,
    ResumeJobParams,
    RetryJobParams,
)

__all__ = ["router", "search_all"]

router = APIRouter(tags=["jobs"])
_STATUS_NAMES = ", ".join(x.value for x in JobStatus)


def _time(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return utc(parse_rfc3339(value, name))
    except ValueError as exc:
        raise InvalidRequest(str(exc), field=name) from exc


def _statuses(values: list[str] | None) -> tuple[JobStatus, ...] | None:
    """Repeated (``status=A&status=B``) or comma separated (``status=A,B``)."""
    if not values:
        return None
    out: list[JobStatus] = []
    for value in values:
        for name in value.split(","):
            try:
                out.append(JobStatus(name.strip().upper()))
            except ValueError as exc:
                raise InvalidRequest(
                    f"status {name!r} is not one of {_STATUS_NAMES}", field="status"
                ) from exc
    return tuple(dict.fromkeys(out))


def _cron_id(text: str | None) -> uuid.UUID | None:
    if text is None:
        return None
    try:
        return shardmap.decode_id("cron", text)
    except ValueError as exc:
        raise InvalidRequest(f"cronJobId: {exc}", field="cronJobId") from exc


def _cursor(text: str | None) -> uuid.UUID | None:
    if not text:
        return None
    try:
        return shardmap.decode_id("job", text)
    except ValueError as exc:
        raise InvalidRequest(
            "cursor is not one this API gave (the nextCursor of a page)", field="cursor"
        ) from exc


async def search_all(
    ctx: ApiContext, params: JobSearchParams
) -> tuple[list[tuple[JobRecord, int]], bool, list[int]]:
    """``params`` on every shard at once, merged newest first: the page (each
    job with its shard), whether more may follow, and the shards that could
    not be read."""

    async def one(shard: int) -> list[JobRecord] | None:
        try:
            return await ctx.store.search_jobs(shard, params)
        except ShardUnavailable:
            return None

    pages = await asyncio.gather(*(one(s) for s in range(ctx.shards.shard_count)))
    missing = [s for s, page in enumerate(pages) if page is None]
    merged = sorted(
        ((job, s) for s, page in enumerate(pages) for job in page or ()),
        key=lambda pair: pair[0].id,
        reverse=True,
    )
    # A shard that filled its page may hold more below it.
    more = len(merged) > params.limit or any(
        page is not None and len(page) >= params.limit for page in pages
    )
    return merged[: params.limit], more, missing


@router.get("/api/v1/jobs", response_model=JobPageOut, responses=problems(422))
async def search_jobs(
    ctx: Ctx,
    owner: Owner,
    status: list[str] | None = Query(
        None, description=f"One or more of {_STATUS_NAMES} (repeat it, or comma separate)."
    ),
    type: str | None = Query(None, min_length=1, max_length=64),
    cronJobId: str | None = Query(None, description="Only this cron job's occurrences."),
    runAtFrom: str | None = Query(None, description="RFC 3339; runAt at or after it."),
    runAtTo: str | None = Query(None, description="RFC 3339; runAt before it."),
    finishedFrom: str | None = Query(None, description="RFC 3339; finished at or after it."),
    finishedTo: str | None = Query(None, description="RFC 3339; finished before it."),
    limit: int = Query(50, ge=1, le=500),
    cursor: str | None = Query(
        None, max_length=64, description="The nextCursor of the previous page."
    ),
    attempts: bool = Query(False, description="Include each job's attempt log."),
) -> JobPageOut:
    """The caller's jobs (pending, running and finished), newest first, filtered,
    a page at a time. ``status=FAILED`` lists the dead letters with their
    ``lastError`` (and, with ``attempts=true``, their attempt logs)."""
    params = JobSearchParams(
        owner=owner,
        limit=limit,
        before=_cursor(cursor),
        statuses=_statuses(status),
        type=type,
        cron_id=_cron_id(cronJobId),
        run_at_from=_time(runAtFrom, "runAtFrom"),
        run_at_to=_time(runAtTo, "runAtTo"),
        finished_from=_time(finishedFrom, "finishedFrom"),
        finished_to=_time(finishedTo, "finishedTo"),
        with_attempts=attempts,
    )
    page, more, missing = await search_all(ctx, params)
    return JobPageOut(
        items=[job_out(job, shard) for job, shard in page],
        nextCursor=job_id_text(page[-1][0].id) if more and page else None,
        missingShards=missing,
    )


@router.post("/api/v1/jobs/{job_id}/retry", response_model=JobOut, responses=problems(404, 409))
async def retry_job(job_id: str, ctx: Ctx, owner: Owner) -> JobOut:
    """A FAILED or CANCELLED job runs again: same ``jobId`` and
    ``scheduledFor`` (so the target's idempotency key still deduplicates), a
    new series of attempts of the size of its last one, due now. Its
    attempt numbers go on from where they stopped: a straggler of an old
    attempt is fenced. 409 for a job in another status."""
    jid = parse_job_id(job_id)
    shard = ctx.shards.shard_of(jid)
    job = await ctx.store.retry_job(shard, RetryJobParams(jid, owner, by=owner))
    return job_out(job, shard)


@router.post(
    "/api/v1/jobs/{job_id}/pause", response_model=JobOut, responses=problems(404, 409, 422)
)
async def pause_job(job_id: str, body: PauseIn, ctx: Ctx, owner: Owner) -> JobOut:
    """Hold a SCHEDULED one-shot job: it is not started until resumed (its
    ``runAt`` is kept). Pausing a paused job changes nothing. 409 once it
    has started, and for a cron job's occurrence (pause the cron job)."""
    jid = parse_job_id(job_id)
    shard = ctx.shards.shard_of(jid)
    job = await ctx.store.pause_job(shard, PauseJobParams(jid, owner, body.reason))
    return job_out(job, shard)


@router.post("/api/v1/jobs/{job_id}/resume", response_model=JobOut, responses=problems(404, 409))
async def resume_job(job_id: str, ctx: Ctx, owner: Owner) -> JobOut:
    """A paused job waits for its ``runAt`` again, or starts at once if that
    has passed. Resuming a job that is not paused changes nothing."""
    jid = parse_job_id(job_id)
    shard = ctx.shards.shard_of(jid)
    params = ResumeJobParams(jid, owner, far_horizon_seconds=ctx.settings.far_horizon_seconds)
    job = await ctx.store.resume_job(shard, params)
    return job_out(job, shard)


def _bulk_search(body: BulkJobsIn, owner: str, statuses: tuple[JobStatus, ...]) -> JobSearchParams:
    return JobSearchParams(
        owner=owner,
        limit=body.limit,
        statuses=statuses,
        type=body.type,
        cron_id=_cron_id(body.cronJobId),
        run_at_from=_time(body.runAtFrom, "runAtFrom"),
        run_at_to=_time(body.runAtTo, "runAtTo"),
        finished_from=_time(body.finishedFrom, "finishedFrom"),
        finished_to=_time(body.finishedTo, "finishedTo"),
        before=_cursor(body.cursor),
    )


async def _bulk(
    ctx: ApiContext, params: JobSearchParams, dry_run: bool, act: str, owner: str
) -> BulkJobsOut:
    page, more, missing = await search_all(ctx, params)
    done: list[str] = []
    failed: list[BulkFailure] = []
    for job, shard in page:
        text = job_id_text(job.id)
        if dry_run:
            done.append(text)
            continue
        try:
            if act == "retry":
                await ctx.store.retry_job(shard, RetryJobParams(job.id, owner, by=owner))
            else:
                await ctx.store.cancel_job(shard, CancelParams(job.id, owner))
        except VakitError as exc:
            failed.append(BulkFailure(jobId=text, status=kind_of(exc).status, detail=exc.message))
            continue
        done.append(text)
    # Below every job examined: the next call meets neither the jobs acted
    # on (a retried one is SCHEDULED again, but a cancelled one would still
    # match a retry's CANCELLED) nor the ones refused.
    cursor = job_id_text(page[-1][0].id) if more and page else None
    return BulkJobsOut(
        dryRun=dry_run, jobIds=done, failed=failed, more=more, nextCursor=cursor, missingShards=missing
    )


@router.post("/api/v1/jobs:retry", response_model=BulkJobsOut, responses=problems(422))
async def retry_jobs(body: BulkJobsIn, ctx: Ctx, owner: Owner) -> BulkJobsOut:
    """Retry the jobs the filters match (FAILED by default; FAILED and/or
    CANCELLED), newest first, at most ``limit`` per call: call again while
    ``more`` is true. ``dryRun`` lists them and changes nothing."""
    statuses = _statuses(list(body.status or ["FAILED"]))
    assert statuses is not None
    refused = [x.value for x in statuses if x not in RETRYABLE]
    if refused:
        raise InvalidRequest(
            f"only FAILED and CANCELLED jobs can be retried, not {', '.join(refused)}",
            field="status",
        )
    return await _bulk(ctx, _bulk_search(body, owner, statuses), body.dryRun, "retry", owner)


@router.post("/api/v1/jobs:cancel", response_model=BulkJobsOut, responses=problems(422))
async def cancel_jobs(body: BulkJobsIn, ctx: Ctx, owner: Owner) -> BulkJobsOut:
    """Cancel the SCHEDULED jobs the filters match (paused ones too), newest
    first, at most ``limit`` per call. ``dryRun`` lists them and changes nothing."""
    if body.status is not None and body.status != ["SCHEDULED"]:
        raise InvalidRequest("only SCHEDULED jobs can be cancelled", field="status")
    params = _bulk_search(body, owner, (JobStatus.SCHEDULED,))
    return await _bulk(ctx, params, body.dryRun, "cancel", owner)
