"""The calendar pages: the list with a form for a new calendar, one
calendar with its days, its edit form (a new version, which re-plans the
crons that follow it) and its deletion (refused while crons follow it).

The forms are read into the API's own request model
(:class:`~cluster.api.calendar_schemas.CalendarIn`), so a page refuses what
``/api/v1/calendars`` refuses, with the same words.
"""

from __future__ import annotations

import re
from typing import TypeVar
from urllib.parse import quote

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import Response

from cluster.api.calendar_schemas import CalendarIn, CreateCalendarIn
from cluster.api.calendars import calendar_body_of, calendar_out
from cluster.api.console.rendering import (
    ctx_of,
    error_page,
    first_error,
    flash_text,
    redirect_back,
    render_page,
)
from cluster.api.console.session import Session, form_of, session_of
from cluster.errors import InvalidRequest, VakitError
from cluster.services import calendars as calendar_service

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

_In = TypeVar("_In", bound=CalendarIn)
WEEK = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_SEPARATORS = re.compile(r"[\s,;]+")


@router.get("/ui/calendars")
async def calendars_page(request: Request, after: str = "", flash: str | None = None) -> Response:
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        owner = session.owner(ctx)
        page = await calendar_service.list_calendars(ctx, owner, after=after[:200], limit=100)
    except VakitError as exc:
        return error_page(request, exc, session)
    return render_page(
        request, "calendars.html", session=session, calendars=[calendar_out(c) for c in page],
        next_cursor=page[-1].name if len(page) == 100 else None, week=WEEK,
        flash=flash_text(flash),
    )  # fmt: skip


@router.get("/ui/calendars/{name}")
async def calendar_page(request: Request, name: str, flash: str | None = None) -> Response:
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        calendar = await calendar_service.get_calendar(ctx, session.owner(ctx), name)
    except VakitError as exc:
        return error_page(request, exc, session)
    return render_page(
        request, "calendar.html", session=session, calendar=calendar_out(calendar), week=WEEK,
        flash=flash_text(flash),
    )  # fmt: skip


@router.post("/ui/calendars")
async def calendar_create(request: Request) -> Response:
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        form = await form_of(request)
        body = _read(CreateCalendarIn, {**_days(form), "name": form.get("name", "").strip()})
        record, created = await calendar_service.create_calendar(
            ctx, session.owner(ctx), body.name, calendar_body_of(body)
        )
    except VakitError as exc:
        return error_page(request, exc, session)
    where = f"/ui/calendars/{quote(record.name, safe='')}"
    return redirect_back(where, "calendar-created" if created else "calendar-same")


@router.post("/ui/calendars/{name}/update")
async def calendar_update(request: Request, name: str) -> Response:
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        form = await form_of(request)
        body = _read(CalendarIn, _days(form))
        await calendar_service.replace_calendar(
            ctx, session.owner(ctx), name, calendar_body_of(body)
        )
    except VakitError as exc:
        return error_page(request, exc, session)
    return redirect_back(f"/ui/calendars/{quote(name, safe='')}", "calendar-updated")


@router.post("/ui/calendars/{name}/delete")
async def calendar_delete(request: Request, name: str) -> Response:
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        await form_of(request)
        await calendar_service.delete_calendar(ctx, session.owner(ctx), name)
    except VakitError as exc:
        return error_page(request, exc, session)
    return redirect_back("/ui/calendars", "calendar-deleted")


def _days(form: dict[str, str]) -> dict[str, object]:
    """The form's fields as the API's body: dates in a text area, one per
    line (or separated by commas), and a checkbox per weekday."""
    days: dict[str, object] = {
        "timeZone": form.get("timeZone", "").strip(),
        "excludeDates": [d for d in _SEPARATORS.split(form.get("excludeDates", "")) if d],
        "includeDates": [d for d in _SEPARATORS.split(form.get("includeDates", "")) if d],
        "businessWeek": [d for d in WEEK if form.get(f"week-{d}") == "yes"],
    }
    if form.get("description", "").strip():
        days["description"] = form["description"].strip()
    return days


def _read(model: type[_In], fields: dict[str, object]) -> _In:
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        raise InvalidRequest(first_error(exc)) from exc
