"""The cron pages: the list, one cron (its preview and recent runs), its
actions (pause, resume, trigger) and a backfill with a dry run first.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import quote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

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
from cluster.api.cron_actions import backfill_out
from cluster.api.crons import cron_out, preview_out, runs_out
from cluster.api.operator_schemas import BackfillIn
from cluster.errors import InvalidRequest, VakitError
from cluster.instants import parse_instant, utc
from cluster.services import cron_actions, crons

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.get("/ui/crons")
async def crons_page(request: Request, after: str = "", flash: str | None = None) -> Response:
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        owner = session.owner(ctx)
        page, next_cursor = await crons.list_crons(ctx, owner, after[:128], 100)
    except VakitError as exc:
        return error_page(request, exc, session)
    return render_page(
        request, "crons.html", session=session, crons=[cron_out(c, shard) for c, shard in page],
        next_cursor=next_cursor,
        flash=flash_text(flash),
    )  # fmt: skip


@router.get("/ui/crons/{cron_id}")
async def cron_page(request: Request, cron_id: str, flash: str | None = None) -> Response:
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        owner = session.owner(ctx)
        cron = cron_out(*await crons.load_cron(ctx, owner, cron_id))
        preview = preview_out(await crons.preview_cron(ctx, owner, cron_id, None, 10))
        runs = runs_out(await crons.cron_runs(ctx, owner, cron_id, 20))
    except VakitError as exc:
        return error_page(request, exc, session)
    return render_page(
        request, "cron.html", session=session, cron=cron, preview=preview, runs=runs.runs,
        flash=flash_text(flash), backfill_range=_yesterday(cron.timeZone),
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
    ctx = ctx_of(request)
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
            raise InvalidRequest(first_error(exc)) from exc
        result, next_from = await cron_actions.backfill_cron(
            ctx, owner, cron_id, utc(parse_instant(body.from_, "from")),
            utc(parse_instant(body.to, "to")), skip_overlap=body.overlap == "SKIP",
            rerun=body.rerun, dry_run=body.dryRun,
        )  # fmt: skip
        out = backfill_out(result, next_from, body.dryRun)
    except VakitError as exc:
        return error_page(request, exc, session)
    return render_page(
        request, "backfill.html", session=session, cron=cron, out=out,
        range_from=body.from_, range_to=body.to, rerun=body.rerun,
    )  # fmt: skip


@router.post("/ui/crons/{cron_id}/{action}")
async def cron_action(request: Request, cron_id: str, action: str) -> Response:
    ctx = ctx_of(request)
    session: Session | None = None
    where = f"/ui/crons/{quote(cron_id, safe='')}"
    try:
        session = session_of(ctx, request)
        form = await form_of(request)
        owner = session.owner(ctx)
        if action == "pause":
            reason = (
                form.get("reason", "").strip()
                or f"paused from the console by {session.principal.name}"
            )
            await cron_actions.pause_cron(ctx, owner, cron_id, reason[:500])
            return redirect_back(where, "paused")
        if action == "resume":
            await cron_actions.resume_cron(ctx, owner, cron_id)
            return redirect_back(where, "resumed")
        if action == "trigger":
            await crons.trigger_cron(ctx, owner, cron_id)
            return redirect_back(where, "triggered")
        raise InvalidRequest(f"no action {action!r} on a cron job")
    except VakitError as exc:
        return error_page(request, exc, session)
