"""Quartz's day forms: ``15W``, ``LW``, ``L-3`` (day of month), ``MON#3``, ``FRIL`` (day of
week), and business days: ``2BD``, ``LBD`` (day of month).

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
* ``nBD``: the month's n-th business day (1-23); ``LBD``: its last. A business
  day is a calendar's when the cron follows one (its business week, excluded
  and included days), Monday to Friday otherwise (and in the offline
  ``vakit crons lint``, which has no calendar).

Weekdays in ``W`` and ``LW`` are Monday to Friday, as in Quartz, whatever the
calendar. This module reads one item of a day
field and, for a given month, says which days its forms select; the wall clock
(:mod:`cluster.cron.wall_clock`) combines them with the plain days. Pure.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

__all__ = [
    "MAX_BUSINESS_DAY",
    "MAX_NTH",
    "BusinessDay",
    "DayForms",
    "month_days_for",
    "parse_dom_form",
    "parse_dow_form",
]

# A weekday occurs at most five times in a month.
MAX_NTH = 5
# A month has at most 23 weekdays; a calendar's working weekends may add more,
# but a form that could never fire under the default week is refused.
MAX_BUSINESS_DAY = 23
# Whether a date is a business day (a calendar's rule; Monday-Friday by default).
BusinessDay = Callable[[date], bool]
_SATURDAY, _SUNDAY = 5, 6  # datetime.weekday()

_DOM_FORM = re.compile(
    r"(?:(?P<lw>LW)|L-(?P<offset>[0-9]{1,3})|(?P<near>[0-9]{1,3})W"
    r"|(?P<lbd>LBD)|(?P<bd>[0-9]{1,3})BD)"
)
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
    business: frozenset[int] = frozenset()
    """``nBD``: the n of each."""
    last_business: bool = False
    """``LBD``."""

    @property
    def dom(self) -> bool:
        """Whether any day-of-month form is present."""
        return bool(
            self.last_offsets
            or self.nearest
            or self.last_weekday
            or self.business
            or self.last_business
        )

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
            self.business | other.business,
            self.last_business or other.last_business,
        )

    def fires_in_month_of(self, length: int) -> bool:
        """Whether a day-of-month form selects a day in some month of ``length`` days."""
        # A month of 28-31 days has length - 8 weekdays at most.
        return (
            self.last_weekday
            or self.last_business
            or any(n < length for n in self.last_offsets)
            or any(n <= length for n in self.nearest)
            or any(n <= length - 8 for n in self.business)
        )


def parse_dom_form(item: str) -> DayForms | str | None:
    """Read ``LW``, ``L-n`` or ``nW``: the forms, an error message, or None if not one."""
    match = _DOM_FORM.fullmatch(item)
    if match is None:
        return None
    if match["lw"]:
        return DayForms(last_weekday=True)
    if match["lbd"]:
        return DayForms(last_business=True)
    if match["bd"] is not None:
        nth = int(match["bd"])
        if not 1 <= nth <= MAX_BUSINESS_DAY:
            return f"'{match['bd']}BD' names no business day: n in 'nBD' is 1-{MAX_BUSINESS_DAY}"
        return DayForms(business=frozenset({nth}))
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
    forms: DayForms, year: int, month: int, *, clamp: bool, business_day: BusinessDay | None = None
) -> tuple[frozenset[int], frozenset[int], dict[int, str]]:
    """Days of (year, month) the day-of-month forms select, those the
    day-of-week forms select, and a note for each day only CLAMP made.
    ``business_day``: a calendar's rule for ``nBD`` and ``LBD`` (default Monday-Friday)."""
    length = calendar.monthrange(year, month)[1]
    dom: set[int] = set()
    notes: dict[int, str] = {}
    if forms.business or forms.last_business:
        working = _business_days(year, month, length, business_day)
        dom.update(working[n - 1] for n in forms.business if n <= len(working))
        if forms.last_business and working:
            dom.add(working[-1])
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


def _business_days(
    year: int, month: int, length: int, business_day: BusinessDay | None
) -> list[int]:
    if business_day is None:
        return [d for d in range(1, length + 1) if calendar.weekday(year, month, d) < _SATURDAY]
    return [d for d in range(1, length + 1) if business_day(date(year, month, d))]
