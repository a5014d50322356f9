"""The dead letters: FAILED jobs grouped by type and last error, and
retrying one group (a dry run first).
"""

from __future__ import annotations

import collections
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from cluster.api.console.rendering import ctx_of, error_page, render_page
from cluster.api.console.session import Session, form_of, session_of
from cluster.api.job_actions import page_out, search_params
from cluster.errors import VakitError
from cluster.services import job_actions

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.get("/ui/dead-letters")
async def dead_letters(request: Request) -> Response:
    """FAILED jobs grouped by type and last error: the newest 500."""
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        owner = session.owner(ctx)
        page = page_out(await job_actions.search_jobs(ctx, search_params(
            owner, status=["FAILED"], type=None, cronJobId=None, runAtFrom=None,
            runAtTo=None, finishedFrom=None, finishedTo=None, limit=500, cursor=None,
            attempts=False,
        )))  # fmt: skip
    except VakitError as exc:
        return error_page(request, exc, session)
    groups: dict[tuple[str, str], list[Any]] = collections.defaultdict(list)
    for job in page.items:
        groups[(job.type, job.lastError or "")].append(job)
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
    return render_page(
        request, "dead_letters.html", session=session, groups=ordered,
        more=page.nextCursor is not None, missing=page.missingShards,
    )  # fmt: skip


@router.post("/ui/dead-letters/retry")
async def retry_group(request: Request) -> Response:
    """Retry one group of dead letters (a type and a last error): without
    ``confirm`` a dry run lists the jobs it would retry; confirmed, each is
    retried as ``POST /jobs/{id}/retry`` would, and the outcome is shown."""
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        form = await form_of(request)
        owner = session.owner(ctx)
        kind, error = form.get("type", ""), form.get("error", "")
        page = page_out(await job_actions.search_jobs(ctx, search_params(
            owner, status=["FAILED"], type=kind[:64] or None, cronJobId=None,
            runAtFrom=None, runAtTo=None, finishedFrom=None, finishedTo=None, limit=500,
            cursor=None, attempts=False,
        )))  # fmt: skip
        jobs = [j for j in page.items if (j.lastError or "") == error]
        results: list[tuple[str, str]] = []
        if form.get("confirm") == "yes":
            for job in jobs:
                try:
                    await job_actions.retry_job(ctx, owner, job.jobId)
                    results.append((job.jobId, "retried"))
                except VakitError as exc:
                    results.append((job.jobId, exc.message))
    except VakitError as exc:
        return error_page(request, exc, session)
    return render_page(
        request, "retry_group.html", session=session, kind=kind, error=error, jobs=jobs,
        results=results, more=page.nextCursor is not None,
        retried=sum(1 for _, r in results if r == "retried"),
    )  # fmt: skip
