"""The calendars API's request and response bodies (``/api/v1/calendars``)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints, WithJsonSchema

from cluster.services.documents import Strict

__all__ = [
    "CALENDAR_DAY",
    "CalendarDay",
    "CalendarIn",
    "CalendarListOut",
    "CalendarOut",
    "CreateCalendarIn",
]

Weekday = Literal["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]


# A day as a calendar takes it: YYYY-MM-DD from 1900 to 2200
# (cluster.cron.calendar_rules), said by the pattern the document shows.
CALENDAR_DAY = "^(?:19[0-9]{2}|2[01][0-9]{2}|2200)-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])$"
CalendarDay = Annotated[
    str,
    StringConstraints(pattern=CALENDAR_DAY),
    WithJsonSchema({"type": "string", "format": "date", "pattern": CALENDAR_DAY}),
]


def _working_week() -> list[Weekday]:
    return ["MON", "TUE", "WED", "THU", "FRI"]


class CalendarIn(Strict):
    """A calendar's days: what a PUT replaces whole."""

    timeZone: str = Field(
        ..., min_length=1, max_length=64, description="IANA zone the dates are read in."
    )
    excludeDates: list[CalendarDay] = Field(
        default_factory=list,
        max_length=2000,
        description="Days not worked although the business week says so (holidays), "
        "ISO dates (YYYY-MM-DD).",
    )
    includeDates: list[CalendarDay] = Field(
        default_factory=list,
        max_length=2000,
        description="Days worked although the business week says not (a working Saturday), "
        "ISO dates.",
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
