"""Calendars under ``/api/v1/calendars``: create, list, read, replace and
delete. The routes translate HTTP; the rules are the service's
(:mod:`cluster.services.calendars`)."""

from __future__ import annotations

from fastapi import APIRouter, Query
from starlette.responses import Response

from cluster.api.calendar_schemas import (
    CalendarIn,
    CalendarListOut,
    CalendarOut,
    CreateCalendarIn,
)
from cluster.api.context import Ctx, Owner
from cluster.api.openapi import problem_responses
from cluster.cron.calendar_rules import calendar_body
from cluster.model import CalendarBody, CalendarRecord
from cluster.services import calendars as calendar_service

__all__ = ["calendar_body_of", "calendar_out", "router"]

router = APIRouter(tags=["calendars"])


def calendar_out(c: CalendarRecord) -> CalendarOut:
    return CalendarOut(
        name=c.name,
        timeZone=c.body.time_zone,
        excludeDates=list(c.body.exclude_dates),
        includeDates=list(c.body.include_dates),
        businessWeek=c.body.week_names(),
        description=c.body.description,
        version=c.version,
        createdAt=c.created_at,
        updatedAt=c.updated_at,
    )


def calendar_body_of(body: CalendarIn) -> CalendarBody:
    """The model's days as the store keeps them (what the console's forms use too)."""
    return calendar_body(
        time_zone=body.timeZone,
        exclude_dates=body.excludeDates,
        include_dates=body.includeDates,
        business_week=body.businessWeek,
        description=body.description,
    )


@router.post(
    "/api/v1/calendars",
    status_code=201,
    response_model=CalendarOut,
    responses={
        200: {"model": CalendarOut, "description": "The name exists already, with these days."},
        **problem_responses(409),
    },
)
async def create_calendar(
    body: CreateCalendarIn, response: Response, ctx: Ctx, owner: Owner
) -> CalendarOut:
    """Define a calendar (version 1). The same name with the same days returns
    it (200); with other days it is a 409: PUT changes it."""
    saved, created = await calendar_service.create_calendar(ctx, owner, body.name, calendar_body_of(body))
    if not created:
        response.status_code = 200
    return calendar_out(saved)


@router.get("/api/v1/calendars", response_model=CalendarListOut)
async def list_calendars(
    ctx: Ctx,
    owner: Owner,
    limit: int = Query(100, ge=1, le=500),
    after: str = Query("", max_length=200, description="The nextCursor of the previous page."),
) -> CalendarListOut:
    """The owner's calendars by name, a page at a time."""
    page = await calendar_service.list_calendars(ctx, owner, after=after, limit=limit)
    cursor = page[-1].name if len(page) == limit else None
    return CalendarListOut(items=[calendar_out(c) for c in page], nextCursor=cursor)


@router.get("/api/v1/calendars/{name}", response_model=CalendarOut)
async def get_calendar(name: str, ctx: Ctx, owner: Owner) -> CalendarOut:
    return calendar_out(await calendar_service.get_calendar(ctx, owner, name))


@router.put("/api/v1/calendars/{name}", response_model=CalendarOut)
async def replace_calendar(name: str, body: CalendarIn, ctx: Ctx, owner: Owner) -> CalendarOut:
    """Replace the calendar's days: a new version (the same days again change nothing)."""
    return calendar_out(await calendar_service.replace_calendar(ctx, owner, name, calendar_body_of(body)))


@router.delete("/api/v1/calendars/{name}", status_code=204, responses=problem_responses(409))
async def delete_calendar(name: str, ctx: Ctx, owner: Owner) -> Response:
    """Delete the calendar; refused (409) while cron jobs follow it."""
    await calendar_service.delete_calendar(ctx, owner, name)
    return Response(status_code=204)
