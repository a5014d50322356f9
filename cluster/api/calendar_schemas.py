"""The calendars API's request and response bodies (``/api/v1/calendars``)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field

from cluster.services.documents import Strict

__all__ = ["CalendarIn", "CalendarListOut", "CalendarOut", "CreateCalendarIn"]

Weekday = Literal["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]


def _working_week() -> list[Weekday]:
    return ["MON", "TUE", "WED", "THU", "FRI"]


class CalendarIn(Strict):
    """A calendar's days: what a PUT replaces whole."""

    timeZone: str = Field(
        ..., min_length=1, max_length=64, description="IANA zone the dates are read in."
    )
    excludeDates: list[str] = Field(
        default_factory=list,
        max_length=2000,
        description="Days not worked although the business week says so (holidays), "
        "ISO dates (YYYY-MM-DD).",
        json_schema_extra={"items": {"type": "string", "format": "date"}},
    )
    includeDates: list[str] = Field(
        default_factory=list,
        max_length=2000,
        description="Days worked although the business week says not (a working Saturday), "
        "ISO dates.",
        json_schema_extra={"items": {"type": "string", "format": "date"}},
    )
    businessWeek: list[Weekday] = Field(
        default_factory=_working_week,
        min_length=1,
        max_length=7,
        description="The days a week works; default MON-FRI.",
    )
    description: str | None = Field(None, max_length=500)


class CreateCalendarIn(CalendarIn):
    name: str = Field(
        ...,
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$",
        description="Unique per owner; crons name it in `calendar`.",
    )


class CalendarOut(BaseModel):
    name: str
    timeZone: str
    excludeDates: list[date]
    includeDates: list[date]
    businessWeek: list[Weekday]
    description: str | None
    version: int = Field(..., description="Each change is a new version.")
    createdAt: datetime | None
    updatedAt: datetime | None


class CalendarListOut(BaseModel):
    items: list[CalendarOut]
    nextCursor: str | None = Field(None, description="Pass as `after` for the next page.")
