"""Quartz's day forms: ``15W``, ``LW``, ``L-3`` (day of month), ``MON#3``, ``FRIL`` (day of week).

Plain cron names days by number; these forms name them by their place in the
month, which people write for settlement runs and payroll:

* ``nW``: the weekday (Monday to Friday) nearest the n-th. A Saturday moves to
  the Friday before and a Sunday to the Monday after, but never across the
  month: ``1W`` on a Saturday is Monday the 3rd, ``31W`` on a Sunday is Friday
  the 29th. A month without the n-th has no such day (monthEndPolicy ``SKIP``)
  or takes its last day as the n-th (``CLAMP``).
* ``LW``: the month's last weekday.
* ``L-n``: n days before the month's last day (``L-0`` is ``L``); a month
  shorter than n+1 days has none.
* ``x#n``: the n-th (1-5) weekday x of the month; months with only four have no
  fifth.
* ``xL``: the month's last weekday x.

Weekdays here are Monday to Friday, as in Quartz; business days of a calendar
are :mod:`cluster.calendars`' business. This module reads one item of a day
field and, for a given month, says which days its forms select; the wall clock
(:mod:`cluster.cron.wall_clock`) combines them with the plain days. Pure.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass

__all__ = [
    "MAX_NTH",
    "DayForms",
    "month_days_for",
    "parse_dom_form",
    "parse_dow_form",
]

# A weekday occurs at most five times in a month.
MAX_NTH = 5
_SATURDAY, _SUNDAY = 5, 6  # datetime.weekday()

_DOM_FORM = re.compile(r"(?:(?P<lw>LW)|L-(?P<offset>[0-9]{1,3})|(?P<near>[0-9]{1,3})W)")
# The weekday is a number or a name; names are checked by the caller's table.
_DOW_FORM = re.compile(r"(?P<day>[0-9]{1,3}|[A-Z]{3})(?:#(?P<nth>[0-9]{1,3})|(?P<last>L))")


@dataclass(frozen=True)
class DayForms:
    """The Quartz forms of one expression's two day fields (empty when none)."""

    last_offsets: frozenset[int] = frozenset()
    """``L`` (0) and ``L-n`` (n)."""
    nearest: frozenset[int] = frozenset()
    """``nW``: the n of each."""
    last_weekday: bool = False
    """``LW``."""
    nth: frozenset[tuple[int, int]] = frozenset()
    """``x#n``: (weekday with Sunday = 0, n)."""
    last_of: frozenset[int] = frozenset()
    """``xL``: weekdays, Sunday = 0."""

    @property
    def dom(self) -> bool:
        """Whether any day-of-month form is present."""
        return bool(self.last_offsets or self.nearest or self.last_weekday)

    @property
    def dow(self) -> bool:
        """Whether any day-of-week form is present."""
        return bool(self.nth or self.last_of)

    def merged(self, other: DayForms) -> DayForms:
        return DayForms(
            self.last_offsets | other.last_offsets,
            self.nearest | other.nearest,
            self.last_weekday or other.last_weekday,
            self.nth | other.nth,
            self.last_of | other.last_of,
        )

    def fires_in_month_of(self, length: int) -> bool:
        """Whether a day-of-month form selects a day in some month of ``length`` days."""
        return (
            self.last_weekday
            or any(n < length for n in self.last_offsets)
            or any(n <= length for n in self.nearest)
        )


def parse_dom_form(item: str) -> DayForms | str | None:
    """Read ``LW``, ``L-n`` or ``nW``: the forms, an error message, or None if not one."""
    match = _DOM_FORM.fullmatch(item)
    if match is None:
        return None
    if match["lw"]:
        return DayForms(last_weekday=True)
    if match["offset"] is not None:
        offset = int(match["offset"])
        if offset > 30:
            return f"'L-{match['offset']}' reaches before the month: n in 'L-n' is 0-30"
        return DayForms(last_offsets=frozenset({offset}))
    day = int(match["near"])
    if not 1 <= day <= 31:
        return f"'{match['near']}W' names no day: the day in 'nW' is 1-31"
    return DayForms(nearest=frozenset({day}))


def parse_dow_form(item: str, names: dict[str, int]) -> DayForms | str | None:
    """Read ``x#n`` or ``xL`` (x a weekday 0-7 or SUN-SAT): the forms, an error, or None."""
    match = _DOW_FORM.fullmatch(item)
    if match is None:
        return None
    token = match["day"]
    if token.isdigit():
        weekday = int(token)
        if weekday > 7:
            return f"{token} is not a weekday: use 0-7 or SUN-SAT before '#' or 'L'"
    elif token in names:
        weekday = names[token]
    else:
        return f"unknown weekday {token!r}: use 0-7 or SUN-SAT before '#' or 'L'"
    weekday %= 7  # 7 is Sunday again
    if match["last"]:
        return DayForms(last_of=frozenset({weekday}))
    nth = int(match["nth"])
    if not 1 <= nth <= MAX_NTH:
        return f"'{item}' asks for occurrence {nth}: a weekday occurs 1 to {MAX_NTH} times a month"
    return DayForms(nth=frozenset({(weekday, nth)}))


def month_days_for(
    forms: DayForms, year: int, month: int, *, clamp: bool
) -> tuple[frozenset[int], frozenset[int], dict[int, str]]:
    """Days of (year, month) the day-of-month forms select, those the
    day-of-week forms select, and a note for each day only CLAMP made."""
    length = calendar.monthrange(year, month)[1]
    dom: set[int] = set()
    notes: dict[int, str] = {}
    for offset in forms.last_offsets:
        if offset < length:
            dom.add(length - offset)
    if forms.last_weekday:
        dom.add(_nearest_back(year, month, length))
    for day in forms.nearest:
        base = day
        if day > length:
            if not clamp:
                continue
            base = length
        found = _nearest_weekday(year, month, base, length)
        dom.add(found)
        if base != day:
            notes.setdefault(
                found,
                f"month end: {calendar.month_name[month]} {year} has no day {day}; "
                f"{day}W fired on the weekday nearest its last day (monthEndPolicy CLAMP)",
            )
    dow: set[int] = set()
    if forms.dow:
        first = (calendar.weekday(year, month, 1) + 1) % 7  # Sunday = 0
        for weekday, nth in forms.nth:
            day = 1 + (weekday - first) % 7 + 7 * (nth - 1)
            if day <= length:
                dow.add(day)
        for weekday in forms.last_of:
            last = (first + length - 1) % 7
            dow.add(length - (last - weekday) % 7)
    return frozenset(dom), frozenset(dow), notes


def _nearest_weekday(year: int, month: int, day: int, length: int) -> int:
    weekday = calendar.weekday(year, month, day)
    if weekday == _SATURDAY:
        # Friday before, unless that leaves the month: then Monday after.
        return day - 1 if day > 1 else day + 2
    if weekday == _SUNDAY:
        return day + 1 if day < length else day - 2
    return day


def _nearest_back(year: int, month: int, day: int) -> int:
    while calendar.weekday(year, month, day) >= _SATURDAY:
        day -= 1
    return day
