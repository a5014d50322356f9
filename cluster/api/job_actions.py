"""What operators do with jobs: search, retry, bulk retry and cancel, pause
and resume (``/api/v1/jobs…``). The routes translate HTTP; the rules (the
merged search across shards, its cursor, what may be retried or
cancelled) are the service's (:mod:`cluster.services.job_actions`).
A shard that cannot be read is named in ``missingShards``.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from fastapi import APIRouter, Query

import shardmap
from cluster.api.context import Ctx, Owner
from cluster.api.jobs import job_out
from cluster.api.operator_schemas import (
    BulkCancelIn,
    BulkFailure,
    BulkJobsIn,
    BulkJobsOut,
    BulkRetryIn,
    JobPageOut,
    PauseIn,
    problems,
)
from cluster.api.problems import kind_of
from cluster.api.schemas import JobOut
from cluster.errors import InvalidRequest
from cluster.instants import INSTANT_PATTERN, parse_instant, utc
from cluster.model import JobSearchParams, JobStatus
from cluster.services import job_actions as actions
from cluster.services.job_actions import BulkResult, JobPage

__all__ = ["page_out", "router", "search_params"]

router = APIRouter(tags=["jobs"])
_STATUS_NAMES = ", ".join(x.value for x in JobStatus)


def _time(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return utc(parse_instant(value, name))
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


def search_params(
    owner: str,
    *,
    status: list[str] | None,
    type: str | None,
    cronJobId: str | None,
    runAtFrom: str | None,
    runAtTo: str | None,
    finishedFrom: str | None,
    finishedTo: str | None,
    limit: int,
    cursor: str | None,
    attempts: bool,
    label: list[str] | None = None,
) -> JobSearchParams:
    """A search's query, as the route and the console's pages take it."""
    return JobSearchParams(
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
        labels=actions.label_filter(label),
    )


def page_out(page: JobPage) -> JobPageOut:
    return JobPageOut(
        items=[job_out(job, shard) for job, shard in page.jobs],
        nextCursor=page.next_cursor,
        missingShards=page.missing,
    )


@router.get("/api/v1/jobs", response_model=JobPageOut, responses=problems(422))
async def search_jobs(
    ctx: Ctx,
    owner: Owner,
    status: list[str] | None = Query(
        None, description=f"One or more of {_STATUS_NAMES} (repeat it, or comma separate)."
    ),
    type: str | None = Query(None, min_length=1, max_length=64),
    cronJobId: str | None = Query(None, description="Only this cron job's occurrences."),
    runAtFrom: str | None = Query(
        None, pattern=INSTANT_PATTERN, description="RFC 3339; runAt at or after it."
    ),
    runAtTo: str | None = Query(
        None, pattern=INSTANT_PATTERN, description="RFC 3339; runAt before it."
    ),
    finishedFrom: str | None = Query(
        None, pattern=INSTANT_PATTERN, description="RFC 3339; finished at or after it."
    ),
    finishedTo: str | None = Query(
        None, pattern=INSTANT_PATTERN, description="RFC 3339; finished before it."
    ),
    limit: int = Query(50, ge=1, le=500),
    cursor: str | None = Query(
        None, max_length=64, description="The nextCursor of the previous page."
    ),
    attempts: bool = Query(False, description="Include each job's attempt log."),
    label: list[str] | None = Query(
        None,
        description="key=value: only jobs with this label (exact match). Repeat it: "
        "a job must have every one.",
    ),
) -> JobPageOut:
    """The caller's jobs (pending, running and finished), newest first, filtered,
    a page at a time. ``status=FAILED`` lists the dead letters with their
    ``lastError`` (and, with ``attempts=true``, their attempt logs)."""
    params = search_params(
        owner, status=status, type=type, cronJobId=cronJobId, runAtFrom=runAtFrom,
        runAtTo=runAtTo, finishedFrom=finishedFrom, finishedTo=finishedTo, limit=limit,
        cursor=cursor, attempts=attempts, label=label,
    )  # fmt: skip
    return page_out(await actions.search_jobs(ctx, params))


@router.post("/api/v1/jobs/{job_id}/retry", response_model=JobOut, responses=problems(404, 409))
async def retry_job(job_id: str, ctx: Ctx, owner: Owner) -> JobOut:
    """A FAILED or CANCELLED job runs again: same ``jobId`` and
    ``scheduledFor`` (so the target's idempotency key still deduplicates), a
    new series of attempts of the size of its last one, due now. Its
    attempt numbers go on from where they stopped: a straggler of an old
    attempt is fenced. 409 for a job in another status."""
    return job_out(*await actions.retry_job(ctx, owner, job_id))


@router.post(
    "/api/v1/jobs/{job_id}/pause", response_model=JobOut, responses=problems(404, 409, 422)
)
async def pause_job(job_id: str, body: PauseIn, ctx: Ctx, owner: Owner) -> JobOut:
    """Hold a SCHEDULED one-shot job: it is not started until resumed (its
    ``runAt`` is kept). Pausing a paused job changes nothing. 409 once it
    has started, and for a cron job's occurrence (pause the cron job)."""
    return job_out(*await actions.pause_job(ctx, owner, job_id, body.reason))


@router.post("/api/v1/jobs/{job_id}/resume", response_model=JobOut, responses=problems(404, 409))
async def resume_job(job_id: str, ctx: Ctx, owner: Owner) -> JobOut:
    """A paused job waits for its ``runAt`` again, or starts at once if that
    has passed. Resuming a job that is not paused changes nothing."""
    return job_out(*await actions.resume_job(ctx, owner, job_id))


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


def _bulk_out(result: BulkResult) -> BulkJobsOut:
    return BulkJobsOut(
        dryRun=result.dry_run,
        jobIds=result.done,
        failed=[
            BulkFailure(jobId=text, status=kind_of(exc).status, detail=exc.message)
            for text, exc in result.failed
        ],
        more=result.more,
        nextCursor=result.next_cursor,
        missingShards=result.missing,
    )


@router.post("/api/v1/jobs:retry", response_model=BulkJobsOut, responses=problems(422))
async def retry_jobs(body: BulkRetryIn, ctx: Ctx, owner: Owner) -> BulkJobsOut:
    """Retry the jobs the filters match (FAILED by default; FAILED and/or
    CANCELLED), newest first, at most ``limit`` per call: call again while
    ``more`` is true. ``dryRun`` lists them and changes nothing."""
    statuses = _statuses(list(body.status or ["FAILED"]))
    assert statuses is not None
    actions.retry_statuses(statuses)
    params = _bulk_search(body, owner, statuses)
    return _bulk_out(await actions.bulk_retry(ctx, params, body.dryRun))


@router.post("/api/v1/jobs:cancel", response_model=BulkJobsOut, responses=problems(422))
async def cancel_jobs(body: BulkCancelIn, ctx: Ctx, owner: Owner) -> BulkJobsOut:
    """Cancel the SCHEDULED jobs the filters match (paused ones too), newest
    first, at most ``limit`` per call. ``dryRun`` lists them and changes nothing."""
    statuses = actions.cancel_statuses(body.status)
    params = _bulk_search(body, owner, statuses)
    return _bulk_out(await actions.bulk_cancel(ctx, params, body.dryRun))
