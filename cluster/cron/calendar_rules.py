"""What a calendar may say, checked; and business days found with it. Pure.

A calendar (:class:`~cluster.model.CalendarBody`) is validated here before
anything is stored: its name, an IANA time zone, ISO dates (at most
:data:`MAX_DATES` of each kind, between years 1900 and 2200) and a business
week of weekday names. :func:`next_business_day` and
:func:`previous_business_day` are what a cron's ``calendarPolicy`` moves a
slot by; they search at most :data:`MAX_MOVE_DAYS` days, since a calendar
whose days are all excluded has no business day to move to.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date, timedelta

from cluster.cron.schedule import load_zone
from cluster.errors import InvalidRequest
from cluster.model import WEEKDAY_NAMES, CalendarBody

__all__ = [
    "CALENDAR_POLICIES",
    "MAX_DATES",
    "MAX_MOVE_DAYS",
    "SETTLE_AHEAD",
    "calendar_body",
    "check_calendar_name",
    "next_business_day",
    "previous_business_day",
]

CALENDAR_POLICIES = ("SKIP", "NEXT_BUSINESS_DAY", "PREVIOUS_BUSINESS_DAY")
# Fifty years of a country's public holidays, with room to spare.
MAX_DATES = 2000
# A slot moves at most this far; beyond it the slot is skipped (and noted).
MAX_MOVE_DAYS = 31
# How far ahead of its next slot a cron that moves slots back
# (PREVIOUS_BUSINESS_DAY) is due until planning has settled it: a move's
# longest reach, and a day for the cron's zone against the calendar's.
SETTLE_AHEAD = timedelta(days=MAX_MOVE_DAYS + 1)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,199}")
_FIRST_YEAR, _LAST_YEAR = 1900, 2200


def check_calendar_name(name: object, field: str = "name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidRequest(
            "a calendar's name is 1-200 characters: letters, digits and . _ : -, "
            "starting with a letter or digit",
            field=field,
        )
    return name


def calendar_body(
    *,
    time_zone: str,
    exclude_dates: Sequence[str | date] = (),
    include_dates: Sequence[str | date] = (),
    business_week: Sequence[str] | None = None,
    description: str | None = None,
) -> CalendarBody:
    """A checked calendar; :class:`InvalidRequest` naming the field otherwise."""
    try:
        load_zone(time_zone)
    except InvalidRequest as exc:
        raise InvalidRequest(str(exc), field="timeZone") from exc
    excluded = _dates(exclude_dates, "excludeDates")
    included = _dates(include_dates, "includeDates")
    both = sorted(set(excluded) & set(included))
    if both:
        raise InvalidRequest(
            f"{both[0].isoformat()} is both excluded and included; list it in one of them",
            field="includeDates",
        )
    week = _week(business_week)
    if description is not None and len(description) > 500:
        raise InvalidRequest("description is at most 500 characters", field="description")
    return CalendarBody(time_zone, excluded, included, week, description)


def _dates(values: Sequence[str | date], field: str) -> tuple[date, ...]:
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InvalidRequest("a list of ISO dates (YYYY-MM-DD) is expected", field=field)
    if len(values) > MAX_DATES:
        raise InvalidRequest(f"at most {MAX_DATES} dates, got {len(values)}", field=field)
    found: set[date] = set()
    for value in values:
        if isinstance(value, date):
            day = value
        else:
            if not isinstance(value, str) or len(value) != 10:
                raise InvalidRequest(f"{value!r} is not an ISO date (YYYY-MM-DD)", field=field)
            try:
                day = date.fromisoformat(value)
            except ValueError as exc:
                raise InvalidRequest(
                    f"{value!r} is not an ISO date (YYYY-MM-DD)", field=field
                ) from exc
        if not _FIRST_YEAR <= day.year <= _LAST_YEAR:
            raise InvalidRequest(
                f"{day.isoformat()} is outside the years {_FIRST_YEAR}-{_LAST_YEAR}", field=field
            )
        found.add(day)
    return tuple(sorted(found))


def _week(names: Sequence[str] | None) -> frozenset[int]:
    if names is None:
        return frozenset(range(5))
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise InvalidRequest(
            'a list of weekdays is expected, e.g. ["MON", "TUE"]', field="businessWeek"
        )
    days: set[int] = set()
    for name in names:
        upper = name.upper() if isinstance(name, str) else ""
        if upper not in WEEKDAY_NAMES:
            raise InvalidRequest(
                f"{name!r} is not a weekday: use {', '.join(WEEKDAY_NAMES)}", field="businessWeek"
            )
        days.add(WEEKDAY_NAMES.index(upper))
    if not days:
        raise InvalidRequest("a business week has at least one day", field="businessWeek")
    return frozenset(days)


def next_business_day(calendar: CalendarBody, day: date) -> date | None:
    """The first business day after ``day``, within :data:`MAX_MOVE_DAYS`."""
    return _move(calendar, day, 1)


def previous_business_day(calendar: CalendarBody, day: date) -> date | None:
    """The last business day before ``day``, within :data:`MAX_MOVE_DAYS`."""
    return _move(calendar, day, -1)


def _move(calendar: CalendarBody, day: date, step: int) -> date | None:
    for n in range(1, MAX_MOVE_DAYS + 1):
        candidate = day + timedelta(days=step * n)
        if calendar.is_business_day(candidate):
            return candidate
    return None
