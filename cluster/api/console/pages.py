"""The console's pages (``/ui/…``): crons, jobs, dead letters, the cluster.

Each page calls the same services the ``/api/v1`` routes call
(:mod:`cluster.services`, with the owner the API's own
:meth:`ApiContext.owner_for` gives the session's token) and shows their
results in the API's shapes, so a page shows exactly what the API would
answer and acts with the same checks: a tenant sees its own jobs and crons, another tenant's job
is "not found", the cluster page is an operator's. An error the API would
answer as problem+json is shown as a page with the same status and detail.

Every action is a form POST with the session's CSRF token, answered with a
redirect to the page it came from (post/redirect/get: a reload repeats
nothing).
"""

from __future__ import annotations

import collections
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import jinja2
from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from pydantic import ValidationError
from starlette.responses import HTMLResponse, RedirectResponse, Response

from cluster.api.console.lateness_chart import (
    CHART_H,
    CHART_W,
    LATENESS_MINUTES,
    chart,
    seconds_text,
)
from cluster.api.console.session import (
    Session,
    act_for,
    csrf_of,
    end_session,
    form_of,
    session_of,
    start_session,
)
from cluster.api.context import ApiContext
from cluster.api.cron_actions import backfill_out
from cluster.api.crons import cron_out, preview_out, runs_out
from cluster.api.job_actions import page_out, search_params
from cluster.api.jobs import job_out
from cluster.api.operator_schemas import BackfillIn
from cluster.api.ops import lateness_out
from cluster.api.problems import kind_of
from cluster.api.schemas import PatchJobIn
from cluster.coordination.report import cluster_status
from cluster.errors import Forbidden, InvalidRequest, Unauthorized, VakitError
from cluster.instants import format_instant, parse_instant, utc
from cluster.services import cron_actions, crons, job_actions, jobs
from cluster.services.insight import start_lateness

__all__ = ["STATIC_DIR", "docs_page", "router", "seconds_text"]

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
STATIC = "/ui/static"
_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
router = APIRouter(include_in_schema=False)
_STATUSES = ("SCHEDULED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED")
# Pages may be framed by nothing, load nothing from elsewhere and post
# only here; scripts are the vendored files (no inline script).
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; "
    "form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _iso(value: datetime | None) -> str:
    """The UTC instant, as the API writes it (a database session in another
    zone hands back its own offset)."""
    return "" if value is None else format_instant(value)


def _in_zone(value: datetime | None, zone: str) -> str:
    """``value`` as wall time in ``zone`` (a cron's), e.g. ``2026-12-02 02:00 +03``."""
    if value is None:
        return ""
    try:
        local = value.astimezone(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        return _iso(value)
    return local.strftime("%Y-%m-%d %H:%M:%S %Z")


_env.filters["iso"] = _iso
_env.filters["in_zone"] = _in_zone
_env.filters["q"] = lambda value: quote(str(value), safe="")
_env.filters["seconds"] = seconds_text


def _ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


def _page(
    request: Request,
    template: str,
    status: int = 200,
    session: Session | None = None,
    **values: Any,
) -> HTMLResponse:
    response = HTMLResponse("", status_code=status, headers=_HEADERS)
    csrf = csrf_of(request, response)
    values.setdefault("flash", None)
    body = _env.get_template(template).render(
        session=session,
        csrf=csrf,
        path=request.url.path,
        static=STATIC,
        **values,
    )
    response.body = response.render(body)
    response.headers["content-length"] = str(len(response.body))
    return response


def _error(request: Request, exc: VakitError, session: Session | None) -> Response:
    """The API's problem as a page: its status, title and detail."""
    if isinstance(exc, Unauthorized):
        return _to_signin(request)
    kind = kind_of(exc)
    return _page(
        request,
        "error.html",
        status=kind.status,
        session=session,
        title=kind.title,
        detail=exc.message,
        status_code=kind.status,
    )


def _to_signin(request: Request) -> RedirectResponse:
    back = request.url.path if request.method == "GET" else "/ui/"
    if request.method == "GET" and request.url.query:
        back += "?" + request.url.query
    return RedirectResponse("/ui/signin?" + urlencode({"next": back}), status_code=303)


# What an action's redirect may show: by code, so a link cannot put words
# of its own on the page.
FLASHES = {
    "paused": "Paused: no slot runs until it is resumed.",
    "resumed": "Resumed: slots that passed meanwhile follow the misfire policy.",
    "triggered": "Triggered: an extra occurrence is due now (see the recent runs).",
    "retried": "Retried: a new series of attempts is due now.",
    "cancelled": "Cancelled.",
    "rescheduled": "Rescheduled: it now runs at the new time.",
}


def _back(where: str, flash: str) -> RedirectResponse:
    return RedirectResponse(f"{where}?{urlencode({'flash': flash})}", status_code=303)


def _flash(code: str | None) -> str | None:
    return FLASHES.get(code or "")


def _safe_next(value: str | None) -> str:
    """Only a console path: never another site (``//host``, ``/ui\\…``)."""
    if value and value.startswith("/ui/") and "//" not in value and "\\" not in value:
        return value
    return "/ui/crons"


# -- sign-in ---------------------------------------------------------------------------


@router.get("/ui")
@router.get("/ui/")
async def home() -> RedirectResponse:
    return RedirectResponse("/ui/crons", status_code=303)


@router.get("/ui/signin")
async def signin_page(request: Request, next: str | None = None) -> Response:
    return _page(request, "signin.html", next=_safe_next(next), message=None)


@router.post("/ui/signin")
async def signin(request: Request) -> Response:
    try:
        form = await form_of(request)
    except Forbidden as exc:
        return _page(request, "signin.html", status=403, next="/ui/crons", message=exc.message)
    token = form.get("token", "").strip()
    target = _safe_next(form.get("next"))
    try:
        _ctx(request).principal_for(f"Bearer {token}")
    except Unauthorized:
        return _page(
            request, "signin.html", status=401, next=target, message="That token is not known here."
        )
    response = RedirectResponse(target, status_code=303)
    start_session(response, request, token)
    return response


@router.post("/ui/signout")
async def signout(request: Request) -> Response:
    try:
        await form_of(request)
    except Forbidden as exc:
        return _error(request, exc, None)
    response = RedirectResponse("/ui/signin", status_code=303)
    end_session(response, request)
    return response


@router.post("/ui/act-for")
async def acting_for(request: Request) -> Response:
    """An operator picks the owner whose jobs and crons the pages show (the
    API's ``?owner=``); empty for its own. A tenant may not."""
    ctx = _ctx(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        form = await form_of(request)
        owner = form.get("owner", "").strip()
        ctx.owner_for(session.authorization, owner or None)  # the API's checks: 403, 422
    except VakitError as exc:
        return _error(request, exc, session)
    response = RedirectResponse("/ui/crons", status_code=303)
    act_for(response, request, owner or None)
    return response


# -- crons -----------------------------------------------------------------------------


@router.get("/ui/crons")
async def crons_page(request: Request, after: str = "", flash: str | None = None) -> Response:
    ctx = _ctx(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        owner = session.owner(ctx)
        page, next_cursor = await crons.list_crons(ctx, owner, after[:128], 100)
    except VakitError as exc:
        return _error(request, exc, session)
    return _page(
        request, "crons.html", session=session, crons=[cron_out(c, shard) for c, shard in page],
        next_cursor=next_cursor,
        flash=_flash(flash),
    )  # fmt: skip


@router.get("/ui/crons/{cron_id}")
async def cron_page(request: Request, cron_id: str, flash: str | None = None) -> Response:
    ctx = _ctx(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        owner = session.owner(ctx)
        cron = cron_out(*await crons.load_cron(ctx, owner, cron_id))
        preview = preview_out(await crons.preview_cron(ctx, owner, cron_id, None, 10))
        runs = runs_out(await crons.cron_runs(ctx, owner, cron_id, 20))
    except VakitError as exc:
        return _error(request, exc, session)
    return _page(
        request, "cron.html", session=session, cron=cron, preview=preview, runs=runs.runs,
        flash=_flash(flash), backfill_range=_yesterday(cron.timeZone),
    )  # fmt: skip


def _yesterday(zone: str) -> tuple[str, str]:
    """Yesterday in ``zone``, midnight to midnight: the backfill form's default."""
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        tz = ZoneInfo("UTC")
    today = datetime.now(tz).replace(hour=0, minute=0, second=0, microsecond=0)
    start = (today - timedelta(days=1)).replace(tzinfo=None).replace(tzinfo=tz)
    return start.isoformat(), today.isoformat()


@router.post("/ui/crons/{cron_id}/backfill")
async def cron_backfill(request: Request, cron_id: str) -> Response:
    """The dry run first (what each slot would do), then, confirmed, the
    backfill itself. Its result is shown rather than redirected to: a
    repeat doubles nothing (each slot at most once)."""
    ctx = _ctx(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        form = await form_of(request)
        owner = session.owner(ctx)
        cron = cron_out(*await crons.load_cron(ctx, owner, cron_id))
        confirmed = form.get("confirm") == "yes"
        try:
            body = BackfillIn.model_validate({
                "from": form.get("from", "").strip(), "to": form.get("to", "").strip(),
                "rerun": form.get("rerun") == "yes", "dryRun": not confirmed,
            })  # fmt: skip
        except ValidationError as exc:
            raise InvalidRequest(_first_error(exc)) from exc
        result, next_from = await cron_actions.backfill_cron(
            ctx, owner, cron_id, utc(parse_instant(body.from_, "from")),
            utc(parse_instant(body.to, "to")), skip_overlap=body.overlap == "SKIP",
            rerun=body.rerun, dry_run=body.dryRun,
        )  # fmt: skip
        out = backfill_out(result, next_from, body.dryRun)
    except VakitError as exc:
        return _error(request, exc, session)
    return _page(
        request, "backfill.html", session=session, cron=cron, out=out,
        range_from=body.from_, range_to=body.to, rerun=body.rerun,
    )  # fmt: skip


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(x) for x in error.get("loc", ()))
    return f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg", "invalid"))


@router.post("/ui/crons/{cron_id}/{action}")
async def cron_action(request: Request, cron_id: str, action: str) -> Response:
    ctx = _ctx(request)
    session: Session | None = None
    where = f"/ui/crons/{quote(cron_id, safe='')}"
    try:
        session = session_of(ctx, request)
        form = await form_of(request)
        owner = session.owner(ctx)
        if action == "pause":
            reason = form.get("reason", "").strip() or f"paused from the console by {session.principal.name}"
            await cron_actions.pause_cron(ctx, owner, cron_id, reason[:500])
            return _back(where, "paused")
        if action == "resume":
            await cron_actions.resume_cron(ctx, owner, cron_id)
            return _back(where, "resumed")
        if action == "trigger":
            await crons.trigger_cron(ctx, owner, cron_id)
            return _back(where, "triggered")
        raise InvalidRequest(f"no action {action!r} on a cron job")
    except VakitError as exc:
        return _error(request, exc, session)


# -- jobs ------------------------------------------------------------------------------


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
    ctx = _ctx(request)
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
        return _error(request, exc, session)
    filters = {
        "status": status, "type": type, "cronJobId": cronJobId, "runAtFrom": runAtFrom,
        "runAtTo": runAtTo, "finishedFrom": finishedFrom, "finishedTo": finishedTo,
    }  # fmt: skip
    next_query = (
        urlencode({**{k: v for k, v in filters.items() if v}, "cursor": page.nextCursor})
        if page.nextCursor
        else None
    )
    return _page(
        request, "jobs.html", session=session, jobs=page.items, filters=filters,
        statuses=_STATUSES, next_query=next_query, missing=page.missingShards,
    )  # fmt: skip


async def _job(request: Request, job_id: str, template: str, flash: str | None) -> Response:
    ctx = _ctx(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        owner = session.owner(ctx)
        job = job_out(*await jobs.get_job(ctx, owner, job_id))
    except VakitError as exc:
        return _error(request, exc, session)
    # The page refreshes itself only while the job may change soon: running,
    # or due within two minutes (a retry's backoff is shorter).
    soon = job.status == "SCHEDULED" and job.runAt - ctx.clock.now() < timedelta(minutes=2)
    poll = job.status == "RUNNING" or (soon and not job.paused)
    return _page(request, template, session=session, job=job, flash=_flash(flash), poll=poll)


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
    ctx = _ctx(request)
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
                raise InvalidRequest(_first_error(exc), field="runAt") from exc
            run_at = utc(parse_instant(patch.runAt, "runAt"))
            await jobs.reschedule_job(ctx, owner, job_id, run_at)
            return _back(where, "rescheduled")
        if action == "retry":
            await job_actions.retry_job(ctx, owner, job_id)
            return _back(where, "retried")
        if action == "cancel":
            await jobs.cancel_job(ctx, owner, job_id)
            return _back(where, "cancelled")
        raise InvalidRequest(f"no action {action!r} on a job")
    except VakitError as exc:
        return _error(request, exc, session)


@router.get("/ui/dead-letters")
async def dead_letters(request: Request) -> Response:
    """FAILED jobs grouped by type and last error: the newest 500."""
    ctx = _ctx(request)
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
        return _error(request, exc, session)
    groups: dict[tuple[str, str], list[Any]] = collections.defaultdict(list)
    for job in page.items:
        groups[(job.type, job.lastError or "")].append(job)
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
    return _page(
        request, "dead_letters.html", session=session, groups=ordered,
        more=page.nextCursor is not None, missing=page.missingShards,
    )  # fmt: skip


@router.post("/ui/dead-letters/retry")
async def retry_group(request: Request) -> Response:
    """Retry one group of dead letters (a type and a last error): without
    ``confirm`` a dry run lists the jobs it would retry; confirmed, each is
    retried as ``POST /jobs/{id}/retry`` would, and the outcome is shown."""
    ctx = _ctx(request)
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
        return _error(request, exc, session)
    return _page(
        request, "retry_group.html", session=session, kind=kind, error=error, jobs=jobs,
        results=results, more=page.nextCursor is not None,
        retried=sum(1 for _, r in results if r == "retried"),
    )  # fmt: skip


# -- the cluster -----------------------------------------------------------------------


@router.get("/ui/cluster")
async def cluster_page(request: Request) -> Response:
    ctx = _ctx(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        ctx.operator_for(session.authorization)  # 401, or 403 for a tenant's token
        report = await cluster_status(ctx.store, ctx.view, coordinated=ctx.view_factory is not None)
        lateness = lateness_out(await start_lateness(ctx, LATENESS_MINUTES), LATENESS_MINUTES)
    except VakitError as exc:
        return _error(request, exc, session)
    backlogs = [s.get("backlog") or 0 for s in report["shards"]]
    last = ctx.clock.now().astimezone(UTC).replace(second=0, microsecond=0)
    by_shard = {s.shard: s for s in lateness.shards}
    return _page(
        request, "cluster.html", session=session, report=report, widest=max([1, *backlogs]),
        lateness=lateness, chart=chart(lateness.cluster, last, CHART_W, CHART_H),
        shard_lateness=by_shard,
        shard_charts={s.shard: chart(s.minutes, last, 90, 20) for s in lateness.shards},
    )  # fmt: skip


# -- /docs without internet ------------------------------------------------------------


async def docs_page(request: Request) -> HTMLResponse:
    """Swagger UI from the vendored files under ``/ui/static/swagger``."""
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url or "/openapi.json",
        title=f"{request.app.title} API",
        swagger_js_url=f"{STATIC}/swagger/swagger-ui-bundle.js",
        swagger_css_url=f"{STATIC}/swagger/swagger-ui.css",
        swagger_favicon_url=f"{STATIC}/swagger/favicon-32x32.png",
        # No validator badge: it would call an outside service.
        swagger_ui_parameters={"validatorUrl": None},
    )
