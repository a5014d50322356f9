"""The job pages: the search with its filters, one job (polled while it may
still change) and its actions (reschedule, retry, cancel).
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import Response

from cluster.api.console.rendering import (
    ctx_of,
    error_page,
    first_error,
    flash_text,
    redirect_back,
    render_page,
)
from cluster.api.console.session import Session, form_of, session_of
from cluster.api.job_actions import page_out, search_params
from cluster.api.jobs import job_out
from cluster.api.schemas import PatchJobIn
from cluster.errors import InvalidRequest, VakitError
from cluster.instants import parse_instant, utc
from cluster.services import job_actions, jobs

__all__ = ["router"]

_STATUSES = ("SCHEDULED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED")
router = APIRouter(include_in_schema=False)


@router.get("/ui/jobs")
async def jobs_page(
    request: Request,
    status: str = "",
    type: str = "",
    cronJobId: str = "",
    runAtFrom: str = "",
    runAtTo: str = "",
    finishedFrom: str = "",
    finishedTo: str = "",
    cursor: str = "",
) -> Response:
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        owner = session.owner(ctx)
        page = page_out(await job_actions.search_jobs(ctx, search_params(
            owner, status=[status] if status else None, type=type[:64] or None,
            cronJobId=cronJobId or None, runAtFrom=runAtFrom or None, runAtTo=runAtTo or None,
            finishedFrom=finishedFrom or None, finishedTo=finishedTo or None, limit=50,
            cursor=cursor[:64] or None, attempts=False,
        )))  # fmt: skip
    except VakitError as exc:
        return error_page(request, exc, session)
    filters = {
        "status": status, "type": type, "cronJobId": cronJobId, "runAtFrom": runAtFrom,
        "runAtTo": runAtTo, "finishedFrom": finishedFrom, "finishedTo": finishedTo,
    }  # fmt: skip
    next_query = (
        urlencode({**{k: v for k, v in filters.items() if v}, "cursor": page.nextCursor})
        if page.nextCursor
        else None
    )
    return render_page(
        request, "jobs.html", session=session, jobs=page.items, filters=filters,
        statuses=_STATUSES, next_query=next_query, missing=page.missingShards,
    )  # fmt: skip


async def _job(request: Request, job_id: str, template: str, flash: str | None) -> Response:
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        owner = session.owner(ctx)
        job = job_out(*await jobs.get_job(ctx, owner, job_id))
    except VakitError as exc:
        return error_page(request, exc, session)
    # The page refreshes itself only while the job may change soon: running,
    # or due within two minutes (a retry's backoff is shorter).
    soon = job.status == "SCHEDULED" and job.runAt - ctx.clock.now() < timedelta(minutes=2)
    poll = job.status == "RUNNING" or (soon and not job.paused)
    return render_page(
        request, template, session=session, job=job, flash=flash_text(flash), poll=poll
    )


@router.get("/ui/jobs/{job_id}")
async def job_page(request: Request, job_id: str, flash: str | None = None) -> Response:
    return await _job(request, job_id, "job.html", flash)


@router.get("/ui/jobs/{job_id}/state")
async def job_state(request: Request, job_id: str) -> Response:
    """The job page's status and attempt log alone: what htmx polls while the
    job has not finished."""
    return await _job(request, job_id, "job_state.html", None)


@router.post("/ui/jobs/{job_id}/{action}")
async def job_action(request: Request, job_id: str, action: str) -> Response:
    ctx = ctx_of(request)
    session: Session | None = None
    where = f"/ui/jobs/{quote(job_id, safe='')}"
    try:
        session = session_of(ctx, request)
        form = await form_of(request)
        owner = session.owner(ctx)
        if action == "reschedule":
            try:
                patch = PatchJobIn.model_validate({"runAt": form.get("runAt", "").strip()})
            except ValidationError as exc:
                raise InvalidRequest(first_error(exc), field="runAt") from exc
            run_at = utc(parse_instant(patch.runAt, "runAt"))
            await jobs.reschedule_job(ctx, owner, job_id, run_at)
            return redirect_back(where, "rescheduled")
        if action == "retry":
            await job_actions.retry_job(ctx, owner, job_id)
            return redirect_back(where, "retried")
        if action == "cancel":
            await jobs.cancel_job(ctx, owner, job_id)
            return redirect_back(where, "cancelled")
        raise InvalidRequest(f"no action {action!r} on a job")
    except VakitError as exc:
        return error_page(request, exc, session)
