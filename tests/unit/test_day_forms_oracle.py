"""Quartz's day forms (``W``, ``LW``, ``#``, ``L-n``, ``xL``), business days (``nBD``,
``LBD``, a calendar's SKIP and NEXT_BUSINESS_DAY) against an independent oracle.

The oracle below uses only the standard library (``datetime``, ``zoneinfo``)
and the definitions as Quartz documents them; it imports nothing from
``cluster.cron``. For each month it picks the day a form names, turns the
slot's wall time into instants by the DST rule of DESIGN.md ("Time"), and the
test compares the result with what the schedule yields (the preview's
``fires``) and with ``next_fire`` asked from each previous firing (what the
materializer does), over 20 years in 8 zones. It works a month at a time, not a
minute at a time, so it is quick.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cluster.cron.schedule import parse_schedule

ZONES = [
    "UTC",
    "America/New_York",  # 1-hour shifts at 02:00
    "Europe/Berlin",  # 1-hour shifts at 02:00/03:00
    "Australia/Lord_Howe",  # 30-minute shifts
    "America/Santiago",  # shifts at midnight: whole local hours of a date vanish
    "Pacific/Chatham",  # +12:45/+13:45
    "Europe/Istanbul",  # gave up DST in 2016
    "Asia/Kolkata",  # +05:30, never shifts
]
FIRST_YEAR, LAST_YEAR = 2010, 2029  # 20 years
MON, TUE, WED, THU, FRI, SAT, SUN = range(7)  # date.weekday()


# --- the definitions, month by month ------------------------------------------


def _last(year: int, month: int) -> date:
    following = date(year + month // 12, month % 12 + 1, 1)
    return following - timedelta(days=1)


def nearest_weekday(n: int, *, clamp: bool = False) -> Callable[[int, int], list[date]]:
    """``nW``: the weekday nearest the n-th, never leaving the month."""

    def days(year: int, month: int) -> list[date]:
        last = _last(year, month)
        if n > last.day and not clamp:
            return []
        target = date(year, month, min(n, last.day))
        if target.weekday() == SAT:
            moved = target - timedelta(days=1)
            return [moved if moved.month == month else target + timedelta(days=2)]
        if target.weekday() == SUN:
            moved = target + timedelta(days=1)
            return [moved if moved.month == month else target - timedelta(days=2)]
        return [target]

    return days


def last_weekday(year: int, month: int) -> list[date]:
    """``LW``: the last Monday-to-Friday of the month."""
    day = _last(year, month)
    while day.weekday() in (SAT, SUN):
        day -= timedelta(days=1)
    return [day]


def before_last(n: int) -> Callable[[int, int], list[date]]:
    """``L-n``: n days before the last day, if the month has that day."""

    def days(year: int, month: int) -> list[date]:
        day = _last(year, month) - timedelta(days=n)
        return [day] if day.month == month else []

    return days


def nth(weekday: int, n: int) -> Callable[[int, int], list[date]]:
    """``x#n``: the n-th weekday x of the month, if there is one."""

    def days(year: int, month: int) -> list[date]:
        found = [
            date(year, month, d)
            for d in range(1, _last(year, month).day + 1)
            if date(year, month, d).weekday() == weekday
        ]
        return found[n - 1 : n]

    return days


def last_of(weekday: int) -> Callable[[int, int], list[date]]:
    """``xL``: the last weekday x of the month."""

    def days(year: int, month: int) -> list[date]:
        day = _last(year, month)
        while day.weekday() != weekday:
            day -= timedelta(days=1)
        return [day]

    return days


def nth_business(n: int, works: Callable[[date], bool]) -> Callable[[int, int], list[date]]:
    """``nBD`` (n > 0) or ``LBD`` (n = -1): the n-th (last) working day of the month."""

    def days(year: int, month: int) -> list[date]:
        every = [date(year, month, d) for d in range(1, _last(year, month).day + 1)]
        working = [d for d in every if works(d)]
        if n == -1:
            return working[-1:]
        return working[n - 1 : n]

    return days


def weekday_works(day: date) -> bool:
    return day.weekday() < SAT


def either(*rules: Callable[[int, int], list[date]]) -> Callable[[int, int], list[date]]:
    return lambda year, month: sorted({d for rule in rules for d in rule(year, month)})


# --- wall time to instants, by DESIGN.md's DST rule -----------------------------


def instants(
    day: date, walls: list[tuple[int, int]], zone: ZoneInfo, wildcard: bool
) -> set[datetime]:
    found: set[datetime] = set()
    for hour, minute in walls:
        wall = datetime(day.year, day.month, day.day, hour, minute)
        real = []
        for fold in (0, 1):
            instant = wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)
            if instant.astimezone(zone).replace(tzinfo=None) == wall:
                real.append(instant)
        if real:
            # Overlap: a wildcard slot fires at each real occurrence, a fixed one
            # at the first only.
            found.update(set(real) if wildcard else {min(real)})
        elif not wildcard:
            # Gap: the first instant whose wall clock is past the slot. The two
            # folds bracket the transition; walk it a minute at a time.
            low, high = sorted(wall.replace(tzinfo=zone, fold=f).astimezone(UTC) for f in (0, 1))
            instant = low
            while instant.astimezone(zone).replace(tzinfo=None) < wall:
                instant += timedelta(minutes=1)
            assert instant <= high
            found.add(instant)
    return found


def expected(
    rule: Callable[[int, int], list[date]],
    walls: list[tuple[int, int]],
    zone: ZoneInfo,
    wildcard: bool,
) -> list[datetime]:
    found: set[datetime] = set()
    for year in range(FIRST_YEAR, LAST_YEAR + 1):
        for month in range(1, 13):
            for day in rule(year, month):
                found |= instants(day, walls, zone, wildcard)
    return sorted(found)


# (expression, rule, wall times, wildcard, monthEndPolicy)
CASES = [
    ("30 9 15W * *", nearest_weekday(15), [(9, 30)], False, "SKIP"),
    ("0 2 1W * *", nearest_weekday(1), [(2, 0)], False, "SKIP"),
    ("30 2 31W * *", nearest_weekday(31), [(2, 30)], False, "SKIP"),
    ("30 2 31W * *", nearest_weekday(31, clamp=True), [(2, 30)], False, "CLAMP"),
    ("0,30 1,2 LW * *", last_weekday, [(1, 0), (1, 30), (2, 0), (2, 30)], False, "SKIP"),
    ("45 23 L-3 * *", before_last(3), [(23, 45)], False, "SKIP"),
    ("0 0 L-30 * *", before_last(30), [(0, 0)], False, "SKIP"),
    # The second Sunday of March and the first of November at 01:30 and 02:30:
    # New York's transition days, every year.
    ("30 1,2 * * SUN#2,SUN#1", either(nth(SUN, 2), nth(SUN, 1)), [(1, 30), (2, 30)], False, "SKIP"),
    ("15 0 * * 6#5", nth(SAT, 5), [(0, 15)], False, "SKIP"),
    ("0 9 * 2,3,10 MON#3", nth(MON, 3), [(9, 0)], False, "SKIP"),
    # The last Sunday: Berlin's transition days.
    ("*/30 0-3 * * SUNL", last_of(SUN), [(h, m) for h in range(4) for m in (0, 30)], True, "SKIP"),
    ("0 3 LW * FRIL", either(last_weekday, last_of(FRI)), [(3, 0)], False, "SKIP"),
    # Business days without a calendar: Monday to Friday.
    ("30 2 2BD * *", nth_business(2, weekday_works), [(2, 30)], False, "SKIP"),
    ("0 0 LBD,23BD * *", either(nth_business(-1, weekday_works), nth_business(23, weekday_works)),
     [(0, 0)], False, "SKIP"),
]  # fmt: skip


@pytest.mark.parametrize("zone_name", ZONES)
def test_day_forms_agree_with_the_standard_library_over_20_years(zone_name: str) -> None:
    zone = ZoneInfo(zone_name)
    # The 20 local years, exactly: no zone in the list shifts at New Year.
    start = datetime(FIRST_YEAR, 1, 1, tzinfo=zone).astimezone(UTC) - timedelta(seconds=1)
    end = datetime(LAST_YEAR + 1, 1, 1, tzinfo=zone).astimezone(UTC) - timedelta(seconds=1)
    for expression, rule, walls, wildcard, month_end in CASES:
        # Months outside the expression's month field fire nothing.
        months = _months(expression)
        want = [
            i
            for i in expected(rule, walls, zone, wildcard)
            if i.astimezone(zone).month in months and start < i <= end
        ]
        schedule = parse_schedule(expression, zone_name, month_end=month_end)  # type: ignore[arg-type]
        got = [f.scheduled_for for f in schedule.fires(start, until=end)]
        assert got == want, (expression, zone_name, month_end, _first_difference(got, want))
        # The materializer asks again after each stored firing.
        previous = start
        for instant in got:
            fire = schedule.next_fire(previous)
            assert fire is not None and fire.scheduled_for == instant, (expression, previous)
            previous = instant


def _months(expression: str) -> set[int]:
    field = expression.split()[3]
    if field == "*":
        return set(range(1, 13))
    return {int(m) for m in field.split(",")}


def _first_difference(got: list[datetime], want: list[datetime]) -> object:
    for g, w in zip(got, want, strict=False):
        if g != w:
            return (g, w)
    return (len(got), len(want))


def test_the_oracle_reads_the_definitions_as_quartz_documents_them() -> None:
    # Quartz's own examples, by hand: in 2026 the 15th of August is a Saturday
    # (15W: Friday the 14th), 1 August a Saturday (1W: Monday the 3rd), 31 May a
    # Sunday (31W: Friday the 29th), 31 January a Saturday (LW: the 30th).
    assert nearest_weekday(15)(2026, 8) == [date(2026, 8, 14)]
    assert nearest_weekday(1)(2026, 8) == [date(2026, 8, 3)]
    assert nearest_weekday(31)(2026, 5) == [date(2026, 5, 29)]
    assert nearest_weekday(31)(2026, 4) == []
    assert last_weekday(2026, 1) == [date(2026, 1, 30)]
    assert before_last(3)(2026, 2) == [date(2026, 2, 25)]
    assert before_last(30)(2026, 2) == []
    assert nth(MON, 3)(2026, 1) == [date(2026, 1, 19)]
    assert nth(SAT, 5)(2026, 1) == [date(2026, 1, 31)]
    assert nth(SAT, 5)(2026, 2) == []
    assert last_of(SUN)(2026, 3) == [date(2026, 3, 29)]


# --- business days: a calendar's SKIP and NEXT_BUSINESS_DAY ---------------------


def _excluded(day: date) -> bool:
    # A fixed, irregular set of holidays: about one day in eleven, runs of
    # two and three days included.
    return (day.toordinal() * 7919) % 11 in (0, 1) or (day.month, day.day) in ((1, 1), (12, 25))


def _included(day: date) -> bool:
    # A working Saturday now and then.
    return day.weekday() == SAT and day.day <= 7 and day.month % 3 == 0


def _business(day: date) -> bool:
    if _included(day):
        return True
    return day.weekday() < SAT and not _excluded(day)


def _days(first: date, last: date) -> list[date]:
    return [date.fromordinal(n) for n in range(first.toordinal(), last.toordinal() + 1)]


def _expected_business(
    rule: Callable[[int, int], list[date]],
    walls: list[tuple[int, int]],
    zone: ZoneInfo,
    policy: str,
) -> list[tuple[datetime, datetime]]:
    """(slot, when it runs) for each slot the calendar keeps, by definition."""
    out: list[tuple[datetime, datetime]] = []
    for slot in expected(rule, walls, zone, wildcard=False):
        local = slot.astimezone(zone)
        day = local.date()
        if _business(day):
            out.append((slot, slot))
            continue
        if policy == "SKIP":
            continue
        target = day + timedelta(days=1)
        while not _business(target) and (target - day).days <= 31:
            target += timedelta(days=1)
        if (target - day).days > 31:
            continue
        [moved] = instants(target, [(local.hour, local.minute)], zone, False)
        out.append((slot, moved))
    return out


def _business_form(n: int) -> Callable[[int, int], list[date]]:
    return nth_business(n, _business)


BUSINESS_CASES = [
    # Business-day forms under the calendar: its working Saturdays count, its
    # holidays do not (and the slot is never moved: it is a business day).
    ("0 9 3BD * *", _business_form(3), [(9, 0)]),
    ("30 2 LBD * *", _business_form(-1), [(2, 30)]),
    # Sundays (the transition days of New York, Berlin, Santiago) and Wednesdays.
    (
        "30 2 * * SUN,WED",
        lambda y, m: [d for d in _days(date(y, m, 1), _last(y, m)) if d.weekday() in (SUN, WED)],
        [(2, 30)],
    ),
    ("0 1 LW * *", last_weekday, [(1, 0)]),
    ("15 0 * * MON#1", nth(MON, 1), [(0, 15)]),
]


@pytest.mark.parametrize("zone_name", ZONES)
@pytest.mark.parametrize("policy", ["SKIP", "NEXT_BUSINESS_DAY"])
def test_business_days_agree_with_the_standard_library_over_20_years(
    zone_name: str, policy: str
) -> None:
    from cluster.cron.calendar_rules import calendar_body
    from cluster.cron.plan import schedule_of
    from cluster.model import CalendarRecord
    from tests.helpers import cron_record

    zone = ZoneInfo(zone_name)
    every_day = _days(date(FIRST_YEAR, 1, 1), date(LAST_YEAR + 1, 2, 28))
    body = calendar_body(
        time_zone=zone_name,
        exclude_dates=[d for d in every_day if _excluded(d) and not _included(d)],
        include_dates=[d for d in every_day if _included(d)],
    )
    start = datetime(FIRST_YEAR, 1, 1, tzinfo=zone).astimezone(UTC) - timedelta(seconds=1)
    end = datetime(LAST_YEAR + 1, 1, 1, tzinfo=zone).astimezone(UTC) - timedelta(seconds=1)
    for expression, rule, walls in BUSINESS_CASES:
        want = [
            (slot, run)
            for slot, run in _expected_business(rule, walls, zone, policy)
            if start < slot <= end
        ]
        # What the materializer plans with: the cron's schedule on its calendar.
        cron = cron_record(
            schedule=expression, time_zone=zone_name, next_fire_at=start, calendar="cal",
            calendar_policy=policy,
        )  # fmt: skip
        schedule = schedule_of(cron, calendar=CalendarRecord("svc", "cal", 1, body))
        got = [(f.scheduled_for, f.run_at) for f in schedule.fires(start, until=end)]
        assert got == want, (expression, zone_name, policy, _first_difference(got, want))  # type: ignore[arg-type]
