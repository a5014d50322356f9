"""Schedule math: cron fields, DST gaps and overlaps, intervals, validation.

Expected instants are written out in UTC for real 2025-2028 transitions (checked
against zoneinfo by ``test_transitions_are_where_these_tests_assume``). The
hypothesis properties compare every firing with a brute-force, minute-by-minute
oracle that shares no code with the schedule math in ``cluster.cron``.
"""

from __future__ import annotations

import calendar
import hashlib
import itertools
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cluster.api.problems import kind_of
from cluster.cron.firing import Fire, Schedule
from cluster.cron.intervals import FixedDelaySchedule, FixedRateSchedule
from cluster.cron.schedule import InvalidSchedule, is_wildcard, parse_schedule, stable_jitter
from cluster.cron.wall_clock import CronSchedule
from cluster.errors import InvalidRequest

NEW_YORK = "America/New_York"
BERLIN = "Europe/Berlin"
LORD_HOWE = "Australia/Lord_Howe"
ZONES = [NEW_YORK, BERLIN, LORD_HOWE, "UTC", "Asia/Kolkata"]

_DAY = timedelta(days=1)
PROPERTY_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,  # keep the checkout clean: no .hypothesis directory
    suppress_health_check=[HealthCheck.too_slow],
)


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def fires(expression: str, zone: str, after: datetime, count: int, seed: str = "") -> list[Fire]:
    return list(parse_schedule(expression, zone, seed=seed).fires(after, count=count))


def instants(
    expression: str, zone: str, after: datetime, count: int, seed: str = ""
) -> list[datetime]:
    return [f.scheduled_for for f in fires(expression, zone, after, count, seed)]


# --- the transitions these tests are written against ----------------------------


@pytest.mark.parametrize(
    ("zone", "instant", "before", "after"),
    [
        # spring forward 02:00 -> 03:00
        (NEW_YORK, at(2026, 3, 8, 7), timedelta(hours=-5), timedelta(hours=-4)),
        # fall back 02:00 -> 01:00, so 01:00-02:00 happens twice
        (NEW_YORK, at(2026, 11, 1, 6), timedelta(hours=-4), timedelta(hours=-5)),
        (BERLIN, at(2026, 3, 29, 1), timedelta(hours=1), timedelta(hours=2)),
        (BERLIN, at(2026, 10, 25, 1), timedelta(hours=2), timedelta(hours=1)),
        # Lord Howe moves by 30 minutes: 02:00 -> 02:30, and 02:00 -> 01:30
        (LORD_HOWE, at(2026, 10, 3, 15, 30), timedelta(hours=10, minutes=30), timedelta(hours=11)),
        (LORD_HOWE, at(2026, 4, 4, 15), timedelta(hours=11), timedelta(hours=10, minutes=30)),
    ],
)
def test_transitions_are_where_these_tests_assume(
    zone: str, instant: datetime, before: timedelta, after: timedelta
) -> None:
    tz = ZoneInfo(zone)
    assert (instant - timedelta(seconds=1)).astimezone(tz).utcoffset() == before
    assert instant.astimezone(tz).utcoffset() == after


# --- DST: gaps --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "expression", "after", "expected"),
    [
        # New York, 2026-03-08: 02:00-02:59 EST never happens; 03:00 EDT is 07:00Z.
        (
            NEW_YORK,
            "30 2 * * *",
            at(2026, 3, 7),
            [at(2026, 3, 7, 7, 30), at(2026, 3, 8, 7), at(2026, 3, 9, 6, 30)],
        ),
        (
            NEW_YORK,
            "0,30 2 * * *",
            at(2026, 3, 7, 8),
            [at(2026, 3, 8, 7), at(2026, 3, 9, 6), at(2026, 3, 9, 6, 30)],
        ),
        # 02:00 and 02:30 move to 03:00, where a real slot already is: one firing.
        (
            NEW_YORK,
            "0,30 2,3 * * *",
            at(2026, 3, 8),
            [at(2026, 3, 8, 7), at(2026, 3, 8, 7, 30), at(2026, 3, 9, 6)],
        ),
        (NEW_YORK, "59 2 * * *", at(2026, 3, 8), [at(2026, 3, 8, 7), at(2026, 3, 9, 6, 59)]),
        # Berlin, 2026-03-29: 02:00-02:59 CET never happens; 03:00 CEST is 01:00Z.
        (
            BERLIN,
            "30 2 * * *",
            at(2026, 3, 28),
            [at(2026, 3, 28, 1, 30), at(2026, 3, 29, 1), at(2026, 3, 30, 0, 30)],
        ),
        (
            BERLIN,
            "0,30 2 * * *",
            at(2026, 3, 28, 2),
            [at(2026, 3, 29, 1), at(2026, 3, 30, 0), at(2026, 3, 30, 0, 30)],
        ),
        # Lord Howe, 2026-10-04: 02:00-02:29 never happens; 02:30 (+11) is 15:30Z.
        (
            LORD_HOWE,
            "0 2 * * *",
            at(2026, 10, 2),
            [at(2026, 10, 2, 15, 30), at(2026, 10, 3, 15, 30), at(2026, 10, 4, 15)],
        ),
        (
            LORD_HOWE,
            "0,15 2 * * *",
            at(2026, 10, 3),
            [at(2026, 10, 3, 15, 30), at(2026, 10, 4, 15), at(2026, 10, 4, 15, 15)],
        ),
        # 02:30 exists: the moved 02:00 and 02:15 merge into it.
        (
            LORD_HOWE,
            "0,15,30 2 * * *",
            at(2026, 10, 3),
            [at(2026, 10, 3, 15, 30), at(2026, 10, 4, 15)],
        ),
    ],
)
def test_fixed_time_slots_in_a_gap_fire_once_at_the_end_of_the_gap(
    zone: str, expression: str, after: datetime, expected: list[datetime]
) -> None:
    assert instants(expression, zone, after, len(expected)) == expected


@pytest.mark.parametrize(
    ("zone", "expression", "after", "local", "note"),
    [
        (
            NEW_YORK,
            "30 2 * * *",
            at(2026, 3, 8),
            "2026-03-08T03:00:00-04:00",
            "DST gap: 02:30 does not exist; fired at 03:00 EDT",
        ),
        (
            NEW_YORK,
            "0,30 2 * * *",
            at(2026, 3, 8),
            "2026-03-08T03:00:00-04:00",
            "DST gap: 02:00 and 02:30 do not exist; fired once at 03:00 EDT",
        ),
        (
            BERLIN,
            "30 2 * * *",
            at(2026, 3, 29),
            "2026-03-29T03:00:00+02:00",
            "DST gap: 02:30 does not exist; fired at 03:00 CEST",
        ),
        (
            LORD_HOWE,
            "15 2 * * *",
            at(2026, 10, 3, 12),
            "2026-10-04T02:30:00+11:00",
            "DST gap: 02:15 does not exist; fired at 02:30 UTC+11:00",
        ),
    ],
)
def test_a_gap_moved_fire_says_so(
    zone: str, expression: str, after: datetime, local: str, note: str
) -> None:
    fire = parse_schedule(expression, zone).next_fire(after)
    assert fire is not None
    assert fire.local.isoformat() == local
    assert fire.local.tzinfo == ZoneInfo(zone)
    assert fire.note == note


@pytest.mark.parametrize(
    ("zone", "expression", "after", "expected"),
    [
        # No slots in the gap; the clock simply jumps past them.
        (
            NEW_YORK,
            "*/15 * * * *",
            at(2026, 3, 8, 6, 30),
            [at(2026, 3, 8, 6, 45), at(2026, 3, 8, 7), at(2026, 3, 8, 7, 15)],
        ),
        (
            NEW_YORK,
            "0 * * * *",
            at(2026, 3, 8, 5, 30),
            [at(2026, 3, 8, 6), at(2026, 3, 8, 7), at(2026, 3, 8, 8)],
        ),
        # Every minute of 02:xx, on a day without 02:xx: nothing until the next day.
        (NEW_YORK, "* 2 * * *", at(2026, 3, 8), [at(2026, 3, 9, 6), at(2026, 3, 9, 6, 1)]),
        (
            BERLIN,
            "*/30 * * * *",
            at(2026, 3, 29, 0, 15),
            [at(2026, 3, 29, 0, 30), at(2026, 3, 29, 1), at(2026, 3, 29, 1, 30)],
        ),
        (BERLIN, "30 * * * *", at(2026, 3, 29), [at(2026, 3, 29, 0, 30), at(2026, 3, 29, 1, 30)]),
        (
            LORD_HOWE,
            "*/15 * * * *",
            at(2026, 10, 3, 15),
            [at(2026, 10, 3, 15, 15), at(2026, 10, 3, 15, 30), at(2026, 10, 3, 15, 45)],
        ),
        # Lord Howe's hourly :00 and :15 slots at 02:xx are gone; 02:30 is real.
        # (01:30 +10:30 is 15:00Z; 02:30 +11 is 15:30Z; 03:00 is 16:00Z.)
        (
            LORD_HOWE,
            "0,15,30 * * * *",
            at(2026, 10, 3, 14, 50),
            [
                at(2026, 10, 3, 15),
                at(2026, 10, 3, 15, 30),
                at(2026, 10, 3, 16),
                at(2026, 10, 3, 16, 15),
            ],
        ),
    ],
)
def test_wildcard_schedules_have_no_slots_in_a_gap(
    zone: str, expression: str, after: datetime, expected: list[datetime]
) -> None:
    got = fires(expression, zone, after, len(expected))
    assert [f.scheduled_for for f in got] == expected
    assert all(f.note is None for f in got)


# --- DST: overlaps ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "expression", "after", "expected"),
    [
        # New York, 2026-11-01: 01:00-01:59 happens as EDT (05:xxZ), then as EST (06:xxZ).
        (
            NEW_YORK,
            "30 1 * * *",
            at(2026, 10, 31),
            [at(2026, 10, 31, 5, 30), at(2026, 11, 1, 5, 30), at(2026, 11, 2, 6, 30)],
        ),
        (
            NEW_YORK,
            "0,30 1 * * *",
            at(2026, 11, 1),
            [at(2026, 11, 1, 5), at(2026, 11, 1, 5, 30), at(2026, 11, 2, 6)],
        ),
        # Berlin, 2026-10-25: 02:00-02:59 happens as CEST (00:xxZ), then as CET (01:xxZ).
        (
            BERLIN,
            "30 2 * * *",
            at(2026, 10, 24),
            [at(2026, 10, 24, 0, 30), at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)],
        ),
        (
            BERLIN,
            "0 2,3 * * *",
            at(2026, 10, 24, 23),
            [at(2026, 10, 25, 0), at(2026, 10, 25, 2), at(2026, 10, 26, 1)],
        ),
        # Lord Howe, 2026-04-05: 01:30-01:59 happens at +11 (14:xxZ), then at +10:30 (15:xxZ).
        (
            LORD_HOWE,
            "45 1 * * *",
            at(2026, 4, 3),
            [at(2026, 4, 3, 14, 45), at(2026, 4, 4, 14, 45), at(2026, 4, 5, 15, 15)],
        ),
        (LORD_HOWE, "30 1 * * *", at(2026, 4, 4), [at(2026, 4, 4, 14, 30), at(2026, 4, 5, 15)]),
    ],
)
def test_fixed_time_slots_in_an_overlap_fire_only_the_first_time(
    zone: str, expression: str, after: datetime, expected: list[datetime]
) -> None:
    assert instants(expression, zone, after, len(expected)) == expected


@pytest.mark.parametrize(
    ("zone", "expression", "after", "note"),
    [
        (
            NEW_YORK,
            "30 1 * * *",
            at(2026, 11, 1),
            "DST overlap: fires only at the first 01:30 (EDT); the repeated 01:30 (EST) is skipped",
        ),
        (
            BERLIN,
            "30 2 * * *",
            at(2026, 10, 25),
            "DST overlap: fires only at the first 02:30 (CEST); "
            "the repeated 02:30 (CET) is skipped",
        ),
        (
            LORD_HOWE,
            "45 1 * * *",
            at(2026, 4, 4),
            "DST overlap: fires only at the first 01:45 (UTC+11:00); "
            "the repeated 01:45 (UTC+10:30) is skipped",
        ),
    ],
)
def test_a_fixed_time_fire_in_an_overlap_says_the_repeat_is_skipped(
    zone: str, expression: str, after: datetime, note: str
) -> None:
    fire = parse_schedule(expression, zone).next_fire(after)
    assert fire is not None
    assert fire.note == note


def test_a_fixed_time_schedule_chained_through_an_overlap_does_not_fire_again() -> None:
    # The materializer stores a fire and asks for the next one after it; asking
    # from inside the repeated hour must not produce the second 01:30.
    schedule = parse_schedule("30 1 * * *", NEW_YORK)
    first = schedule.next_fire(at(2026, 11, 1))
    assert first is not None and first.scheduled_for == at(2026, 11, 1, 5, 30)
    again = schedule.next_fire(first.scheduled_for)
    assert again is not None and again.scheduled_for == at(2026, 11, 2, 6, 30)
    # Even from a moment inside the second pass of 01:xx.
    inside = schedule.next_fire(at(2026, 11, 1, 6, 10))
    assert inside is not None and inside.scheduled_for == at(2026, 11, 2, 6, 30)


@pytest.mark.parametrize(
    ("zone", "expression", "after", "expected"),
    [
        (
            NEW_YORK,
            "0 * * * *",
            at(2026, 11, 1, 4, 30),
            [at(2026, 11, 1, 5), at(2026, 11, 1, 6), at(2026, 11, 1, 7)],
        ),
        (
            BERLIN,
            "0 * * * *",
            at(2026, 10, 24, 23, 30),
            [at(2026, 10, 25, 0), at(2026, 10, 25, 1), at(2026, 10, 25, 2)],
        ),
        (
            BERLIN,
            "30 * 25 10 *",
            at(2026, 10, 24, 23, 45),
            [at(2026, 10, 25, 0, 30), at(2026, 10, 25, 1, 30), at(2026, 10, 25, 2, 30)],
        ),
        # Lord Howe's overlap is 01:30-01:59: the hourly :00 slots are not in it.
        (
            LORD_HOWE,
            "0 * * * *",
            at(2026, 4, 4, 13, 30),
            [at(2026, 4, 4, 14), at(2026, 4, 4, 15, 30), at(2026, 4, 4, 16, 30)],
        ),
        (
            LORD_HOWE,
            "*/15 * * * *",
            at(2026, 4, 4, 14, 20),
            [
                at(2026, 4, 4, 14, 30),
                at(2026, 4, 4, 14, 45),
                at(2026, 4, 4, 15),
                at(2026, 4, 4, 15, 15),
                at(2026, 4, 4, 15, 30),
            ],
        ),
    ],
)
def test_wildcard_schedules_fire_at_each_occurrence_in_an_overlap(
    zone: str, expression: str, after: datetime, expected: list[datetime]
) -> None:
    assert instants(expression, zone, after, len(expected)) == expected


def test_every_15_minutes_fires_eight_times_in_new_yorks_repeated_hour() -> None:
    schedule = parse_schedule("*/15 * * * *", NEW_YORK)
    got = list(schedule.fires(at(2026, 11, 1, 4, 59), until=at(2026, 11, 1, 7)))
    repeated = [f for f in got if f.local.hour == 1]
    assert [f.scheduled_for for f in repeated] == [
        at(2026, 11, 1, 5) + timedelta(minutes=15 * i) for i in range(8)
    ]
    assert [f.local.utcoffset() for f in repeated] == [timedelta(hours=-4)] * 4 + [
        timedelta(hours=-5)
    ] * 4
    assert repeated[0].note == "DST overlap: first 01:00 (EDT); it repeats at 01:00 (EST)"
    assert repeated[4].note == "DST overlap: repeated 01:00 (EST)"
    assert [f.note for f in got if f.local.hour != 1] == [None] * (len(got) - 8)


@pytest.mark.parametrize(
    ("expression", "wildcard"),
    [
        ("0 * * * *", True),
        ("*/15 * * * *", True),
        ("30 * * * *", True),
        ("* 2 * * *", True),
        ("*/5 3 * * *", True),
        ("30 2 * * *", False),
        ("0,30 2 * * *", False),
        ("0-59 2 * * *", False),
        ("H H * * *", False),
        ("H/15 H * * *", False),
        ("@hourly", True),
        ("@daily", False),
        ("@midnight", False),
        ("@weekly", False),
        ("@monthly", False),
        ("@yearly", False),
        ("every 15m", True),
        ("every 1h fixed-delay", True),
    ],
)
def test_is_wildcard(expression: str, wildcard: bool) -> None:
    assert is_wildcard(expression) is wildcard
    schedule = parse_schedule(expression, "UTC")
    if isinstance(schedule, CronSchedule):
        assert schedule.wildcard is wildcard


def test_is_wildcard_refuses_garbage() -> None:
    with pytest.raises(InvalidSchedule):
        is_wildcard("* * *")


def test_a_wildcard_day_field_does_not_make_a_schedule_wildcard() -> None:
    # Only minute and hour decide; "0 0 * * *" is fixed-time at midnight.
    assert not is_wildcard("0 0 * * *")
    assert not is_wildcard("0 0 */2 * *")


# --- calendar -----------------------------------------------------------------------


def test_february_29_fires_only_in_leap_years() -> None:
    assert instants("0 0 29 2 *", "UTC", at(2026, 1, 1), 3) == [
        at(2028, 2, 29),
        at(2032, 2, 29),
        at(2036, 2, 29),
    ]
    # 2100 is not a leap year: from 2096 the next is 2104.
    assert instants("0 0 29 2 *", "UTC", at(2096, 3, 1), 1) == [at(2104, 2, 29)]


def test_last_day_of_month() -> None:
    assert instants("0 0 L * *", "UTC", at(2027, 1, 1), 4) == [
        at(2027, 1, 31),
        at(2027, 2, 28),
        at(2027, 3, 31),
        at(2027, 4, 30),
    ]
    assert instants("0 0 L * *", "UTC", at(2027, 12, 15), 5) == [
        at(2027, 12, 31),
        at(2028, 1, 31),
        at(2028, 2, 29),
        at(2028, 3, 31),
        at(2028, 4, 30),
    ]
    assert instants("0 0 L 2 *", "UTC", at(2027, 1, 1), 2) == [at(2027, 2, 28), at(2028, 2, 29)]
    assert instants("0 0 15,L 4 *", "UTC", at(2027, 1, 1), 2) == [
        at(2027, 4, 15),
        at(2027, 4, 30),
    ]


def test_day_31_skips_months_without_one() -> None:
    assert [d.month for d in instants("0 0 31 * *", "UTC", at(2027, 1, 1), 7)] == [
        1,
        3,
        5,
        7,
        8,
        10,
        12,
    ]
    assert [d.month for d in instants("0 0 30 * *", "UTC", at(2027, 1, 1), 11)] == [
        1,
        3,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        12,
    ]


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    # Vixie cron: the 1st of the month OR any Wednesday.
    got = instants("0 0 1 * 3", "UTC", at(2026, 4, 1), 12)
    expected = [
        at(d.year, d.month, d.day)
        for d in (date(2026, 4, 2) + timedelta(days=i) for i in range(120))
        if d.day == 1 or d.weekday() == 2
    ][:12]
    assert got == expected


def test_day_of_month_and_day_of_week_when_one_starts_with_a_star() -> None:
    # Vixie cron reads "*/2" as unrestricted, so both fields must match: Mondays
    # that fall on an odd day. (croniter reads this as OR.)
    got = instants("0 0 */2 * 1", "UTC", at(2026, 1, 1), 6)
    assert got == [
        at(2026, 1, 5),
        at(2026, 1, 19),
        at(2026, 2, 9),
        at(2026, 2, 23),
        at(2026, 3, 9),
        at(2026, 3, 23),
    ]
    assert all(d.weekday() == 0 and d.day % 2 == 1 for d in got)


def test_sunday_is_0_and_7() -> None:
    sundays = instants("0 12 * * 0", "UTC", at(2026, 1, 1), 5)
    assert sundays[0] == at(2026, 1, 4, 12)
    assert instants("0 12 * * 7", "UTC", at(2026, 1, 1), 5) == sundays
    assert instants("0 12 * * sun", "UTC", at(2026, 1, 1), 5) == sundays


def test_names_are_case_insensitive() -> None:
    named = instants("0 9 * JAN,jul Mon-FRI", BERLIN, at(2026, 1, 1), 40)
    assert named == instants("0 9 * 1,7 1-5", BERLIN, at(2026, 1, 1), 40)
    assert instants("0 9 * * FRI-SUN", "UTC", at(2026, 1, 1), 9) == instants(
        "0 9 * * 5,6,0", "UTC", at(2026, 1, 1), 9
    )


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@HOURLY", "0 * * * *"),
    ],
)
def test_macros(macro: str, equivalent: str) -> None:
    for zone in (NEW_YORK, LORD_HOWE):
        after = at(2026, 3, 1)
        assert instants(macro, zone, after, 30) == instants(equivalent, zone, after, 30)
    assert parse_schedule(macro, "UTC").expression == macro


@pytest.mark.parametrize(
    "expression",
    [
        "*/7 * * * *",
        "0 */5 * * *",
        "15 3 1,15 * *",
        "0 0 * * 1-5",
        "0 12 L * *",
        "0 0 29 2 *",
        "30 6 * JAN,JUL SUN",
        "0 0 13 * 5",
        "5-10/2 1-3 * * *",
        "0 0 1 */3 *",
        "59 23 31 12 *",
    ],
)
def test_agrees_with_croniter_where_there_is_no_dst(expression: str) -> None:
    start = at(2026, 1, 1)
    reference = croniter(expression, start)
    expected = [reference.get_next(datetime) for _ in range(200)]
    assert instants(expression, "UTC", start, 200) == expected


# --- H, jitter ----------------------------------------------------------------------


def _sha_mod(text: str, modulus: int) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") % modulus


def test_h_is_stable_for_a_seed() -> None:
    first = instants("H H * * *", "UTC", at(2026, 1, 1), 3, seed="job-42")
    again = instants("H H * * *", "UTC", at(2026, 1, 1), 3, seed="job-42")
    assert first == again
    # Pinned: every node and every release must pick the same minute and hour.
    assert (first[0].hour, first[0].minute) == (7, 55)
    assert (first[0].minute, first[0].hour) == (_sha_mod("job-420", 60), _sha_mod("job-421", 24))


def test_h_spreads_different_seeds() -> None:
    minutes = {
        instants("H * * * *", "UTC", at(2026, 1, 1), 1, seed=f"cron-{i}")[0].minute
        for i in range(200)
    }
    assert len(minutes) > 40


def test_h_with_a_step_keeps_the_step() -> None:
    for i in range(30):
        got = instants("H/15 * * * *", "UTC", at(2025, 12, 31, 23, 59), 8, seed=f"cron-{i}")
        offset = got[0].minute
        assert offset < 15
        assert [d.minute for d in got[:4]] == [offset, offset + 15, offset + 30, offset + 45]
        assert all(b - a == timedelta(minutes=15) for a, b in itertools.pairwise(got))


def test_h_with_a_range_stays_in_it() -> None:
    for i in range(50):
        got = instants("H(0-29) H(9-17) * * H(1-5)", "UTC", at(2026, 1, 1), 2, seed=f"s{i}")
        assert all(d.minute < 30 and 9 <= d.hour <= 17 and 0 <= d.weekday() <= 4 for d in got)
    # In the day-of-month field H picks from 1-28, so it fires every month.
    for i in range(50):
        got = instants("0 0 H * *", "UTC", at(2025, 12, 31, 23, 59), 12, seed=f"s{i}")
        assert [d.month for d in got] == list(range(1, 13))


def test_stable_jitter() -> None:
    assert stable_jitter("cron-1", 0) == 0
    assert stable_jitter("job-42", 300) == _sha_mod("job-42", 300) == 6
    values = [stable_jitter(f"cron-{i}", 60) for i in range(300)]
    assert all(0 <= v < 60 for v in values)
    assert len(set(values)) > 40
    assert values == [stable_jitter(f"cron-{i}", 60) for i in range(300)]
    with pytest.raises(ValueError):
        stable_jitter("x", -1)


# --- intervals ----------------------------------------------------------------------


def test_fixed_rate_is_anchored_and_does_not_drift() -> None:
    anchor = at(2026, 1, 1, 0, 7)
    schedule = parse_schedule("every 15m", BERLIN, anchor=anchor)
    assert isinstance(schedule, FixedRateSchedule)
    assert schedule.kind == "FIXED_RATE"
    got = list(schedule.fires(datetime(2026, 3, 1, 12, 3, 59, tzinfo=UTC), count=20_000))
    assert got[0].scheduled_for == at(2026, 3, 1, 12, 7)
    assert all((f.scheduled_for - anchor) % timedelta(minutes=15) == timedelta(0) for f in got)
    assert all(
        b.scheduled_for - a.scheduled_for == timedelta(minutes=15)
        for a, b in itertools.pairwise(got)
    )
    # Real elapsed time: the DST change on 2026-03-29 does not disturb the grid.
    assert got[-1].scheduled_for == at(2026, 3, 1, 12, 7) + 19_999 * timedelta(minutes=15)
    assert all(f.note is None for f in got)
    # Exactly on the grid: the next one, not the same one.
    on_grid = schedule.next_fire(at(2026, 3, 1, 12, 7))
    assert on_grid is not None and on_grid.scheduled_for == at(2026, 3, 1, 12, 22)


def test_fixed_rate_default_anchor_is_the_epoch() -> None:
    schedule = parse_schedule("every 1h30m", NEW_YORK)
    fire = schedule.next_fire(at(2026, 3, 1, 0, 1))
    assert fire is not None
    assert fire.scheduled_for == at(2026, 3, 1, 1, 30)
    assert fire.local.isoformat() == "2026-02-28T20:30:00-05:00"
    assert (fire.scheduled_for - datetime(1970, 1, 1, tzinfo=UTC)) % timedelta(minutes=90) == (
        timedelta(0)
    )


def test_fixed_delay_counts_from_the_previous_finish() -> None:
    schedule = parse_schedule("every 15m fixed-delay", BERLIN)
    assert isinstance(schedule, FixedDelaySchedule)
    assert schedule.kind == "FIXED_DELAY"
    finish = datetime(2026, 3, 1, 12, 3, 27, 500, tzinfo=UTC)
    fire = schedule.next_fire(finish)
    assert fire is not None and fire.scheduled_for == finish + timedelta(minutes=15)
    preview = [f.scheduled_for for f in schedule.fires(finish, count=3)]
    assert preview == [finish + timedelta(minutes=15 * k) for k in (1, 2, 3)]


@pytest.mark.parametrize(
    ("expression", "period"),
    [
        ("every 90s", timedelta(seconds=90)),
        ("every 1m", timedelta(minutes=1)),
        ("every 15M", timedelta(minutes=15)),
        ("every 1h30m", timedelta(minutes=90)),
        ("every 2d", timedelta(days=2)),
        ("every 1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("  Every   365d  ", timedelta(days=365)),
    ],
)
def test_interval_units(expression: str, period: timedelta) -> None:
    schedule = parse_schedule(expression, "UTC")
    assert isinstance(schedule, FixedRateSchedule)
    assert schedule.period == period
    assert isinstance(
        parse_schedule(f"{expression.strip()} fixed-delay", "UTC"), FixedDelaySchedule
    )


# --- the API of fires() ----------------------------------------------------------


def test_fires_count_and_until() -> None:
    schedule = parse_schedule("0 * * * *", "UTC")
    after = at(2026, 1, 1)
    assert list(schedule.fires(after, count=0)) == []
    assert len(list(schedule.fires(after, count=5))) == 5
    # `until` is inclusive.
    assert [f.scheduled_for for f in schedule.fires(after, until=at(2026, 1, 1, 3))] == [
        at(2026, 1, 1, 1),
        at(2026, 1, 1, 2),
        at(2026, 1, 1, 3),
    ]
    assert len(list(schedule.fires(after, count=2, until=at(2026, 1, 2)))) == 2
    assert len(list(schedule.fires(after, count=50, until=at(2026, 1, 1, 2, 30)))) == 2
    with pytest.raises(ValueError):
        schedule.fires(after, count=-1)


def test_after_in_another_zone_and_naive_times() -> None:
    schedule = parse_schedule("0 9 * * *", BERLIN)
    tokyo = datetime(2026, 6, 1, 15, 59, tzinfo=ZoneInfo("Asia/Tokyo"))  # 08:59 Berlin
    fire = schedule.next_fire(tokyo)
    assert fire is not None and fire.scheduled_for == at(2026, 6, 1, 7)
    assert fire.scheduled_for.tzinfo is UTC
    with pytest.raises(ValueError):
        schedule.next_fire(datetime(2026, 6, 1))
    with pytest.raises(ValueError):
        schedule.fires(at(2026, 6, 1), until=datetime(2026, 6, 2))
    with pytest.raises(ValueError):
        parse_schedule("every 5m", "UTC", anchor=datetime(2026, 6, 1))


def test_schedule_attributes() -> None:
    schedule = parse_schedule(" 0 9 * * * ", BERLIN)
    assert isinstance(schedule, Schedule)
    assert (schedule.expression, schedule.time_zone, schedule.kind) == ("0 9 * * *", BERLIN, "CRON")


def test_the_end_of_the_calendar() -> None:
    assert parse_schedule("0 0 29 2 *", "UTC").next_fire(at(9999, 3, 1)) is None
    assert parse_schedule("every 5m", "UTC").next_fire(datetime.max.replace(tzinfo=UTC)) is None


# --- validation ---------------------------------------------------------------------


def test_invalid_schedule_is_an_invalid_request_and_a_value_error() -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_schedule("0 0 30 2 *", "UTC")
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, InvalidRequest)
    # Errors know no HTTP: the status comes from the API's one table.
    assert kind_of(caught.value).status == 422


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("0 0 30 2 *", "day-of-month 30 never occurs in February: '0 0 30 2 *' would never fire"),
        (
            "0 0 31 4,6,9,11 *",
            "day-of-month 31 never occurs in April, June, September or November: "
            "'0 0 31 4,6,9,11 *' would never fire",
        ),
        ("5-2 * * * *", "write 5-59,0-2"),
        ("0 0 ? * *", "'?' is Quartz syntax: write '*'"),
        ("0 0 0 * * *", "seconds and year fields are not supported"),
        ("*/0 * * * *", "must be between 1 and 60"),
        ("0 24 * * *", "24 is out of range for the hour field"),
        ("every 30s", "the minimum interval is 1 minute"),
    ],
)
def test_messages_say_what_to_do(expression: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_schedule(expression, "UTC")
    assert message in str(caught.value)


def test_february_30_with_a_weekday_still_fires_on_that_weekday() -> None:
    # Both day fields restricted: OR, so Mondays in February are enough.
    got = instants("0 0 30 2 1", "UTC", at(2026, 1, 1), 2)
    assert got == [at(2026, 2, 2), at(2026, 2, 9)]


@pytest.mark.parametrize(
    ("expression", "allowed"),
    [
        ("* * * * *", False),
        ("*/2 * * * *", False),
        ("*/5 * * * *", True),
        ("0,1 * * * *", False),
        ("0,58 * * * *", False),  # 58 -> 0 of the next hour is 2 minutes
        ("0,30 * * * *", True),
        ("58 23 * * *", True),
        ("0,4 0 * * *", False),
        ("H/5 * * * *", True),
        ("every 5m", True),
        ("every 4m59s", False),
        ("every 2m fixed-delay", False),
        ("@hourly", True),
    ],
)
def test_min_interval(expression: str, allowed: bool) -> None:
    assert parse_schedule(expression, "UTC") is not None  # the default, 1 minute
    if allowed:
        parse_schedule(expression, "UTC", min_interval=timedelta(minutes=5))
    else:
        with pytest.raises(InvalidSchedule, match="the minimum interval is 5 minutes"):
            parse_schedule(expression, "UTC", min_interval=timedelta(minutes=5))


HOSTILE = [
    "",
    "   ",
    "\t\n",
    "x" * 201,
    "0 " * 100,
    "* * * * * *",
    "0 0 * * * 2026",
    "0 0 0 * * * 2026",
    "* * * *",
    "*",
    "*/0 * * * *",
    "0/0 * * * *",
    "60 * * * *",
    "0 24 * * *",
    "0 0 0 * *",
    "0 0 32 * *",
    "0 0 * 0 *",
    "0 0 * 13 *",
    "0 0 * * 8",
    "-1 * * * *",
    "0 0 30 2 *",
    "0 0 31 4,6,9,11 *",
    "0 0 30,31 2 *",
    "5-2 * * * *",
    "0 0 * * SAT-MON",
    "H(30-10) * * * *",
    "H(0-99) * * * *",
    ",".join(["1"] * 61) + " * * * *",
    "*/99999999999999999999 * * * *",
    "9" * 150 + " * * * *",
    "0 0 * * MON#6",
    "0 0 * * MON#0",
    "0 0 MON#2 * *",
    "0 0 ? * *",
    "0 0 LW/2 * *",
    "0 0 L-31 * *",
    "0 0 L-29 2 *",
    "0 0 32W * *",
    "0 0 1-5W * *",
    "0 0 30W 2 *",
    "0 0 * * L",
    "0 0 * * 15W",
    "0 15W * * *",
    "0 0 24BD * *",
    "0 0 0BD * *",
    "0 0 23BD 2 *",
    "0 0 LBD/2 * *",
    "0 0 1-3BD * *",
    "0 0 * * 2BD",
    "0 L * * *",
    "0 0 L/2 * *",
    "0 0 * FOO *",
    "0 0 * * FUNDAY",
    "0 0 JAN * *",
    "1- * * * *",
    "*/ * * * *",
    ",,, * * * *",
    "((((((((((",
    "0 0 * * *; rm -rf /",
    "0 0 * * *\n0 1 * * *",
    "0\x000 * * * *",
    "\uff10 \uff10 * * *",  # full-width digits
    "\u0663 * * * *",  # Arabic-Indic three
    "@reboot",
    "@every 5m",
    "@fortnightly",
    "every",
    "every 30s",
    "every 59s",
    "every 0m",
    "every -5m",
    "every 15x",
    "every 1m1h",
    "every 366d",
    "every 99999999999999999999d",
    "every 15m fixed-rat",
    "every 15m fixed-delay please",
]


@pytest.mark.parametrize("expression", HOSTILE)
def test_hostile_expressions_are_refused_quickly(expression: str) -> None:
    # A functional bound (the API must not be tied up by one request), not a
    # benchmark: generous on purpose.
    started = time.perf_counter()
    with pytest.raises(InvalidSchedule):
        parse_schedule(expression, "UTC", seed="x" * 10_000)
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize(
    "zone",
    [
        "",
        "Mars/Olympus",
        "localtime",
        "Factory",
        "posixrules",
        "/etc/localtime",
        "../../../etc/passwd",
        "Europe/../../etc/passwd",
        "Europe//Berlin",
        "UTC\x00",
        "Europe/Berlin ",
        "a" * 100,
        "america/new_york",
    ],
)
def test_unknown_time_zones_are_refused(zone: str) -> None:
    started = time.perf_counter()
    with pytest.raises(InvalidSchedule):
        parse_schedule("0 0 * * *", zone)
    assert time.perf_counter() - started < 2.0


def test_a_miscased_zone_gets_a_suggestion() -> None:
    with pytest.raises(InvalidSchedule, match="did you mean 'America/New_York'"):
        parse_schedule("0 0 * * *", "america/new_york")


@pytest.mark.parametrize(
    "zone", ["UTC", "Etc/UTC", "Asia/Kolkata", "America/Argentina/Buenos_Aires", "Etc/GMT+5"]
)
def test_real_zones_are_accepted(zone: str) -> None:
    assert parse_schedule("0 0 * * *", zone).next_fire(at(2026, 1, 1)) is not None


# --- properties ---------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    text: str
    values: frozenset[int]
    star: bool
    last: bool = False


_MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_WEEKDAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


@st.composite
def fields(
    draw: st.DrawFn,
    low: int,
    high: int,
    star_high: int,
    *,
    names: list[str] | None = None,
    name_base: int = 0,
    allow_last: bool = False,
    star_weight: int = 1,
    favourites: tuple[int, ...] = (),
    only_lists: bool = False,
) -> Field:
    """One cron field and, computed independently, the set of values it means.

    ``favourites`` are drawn more often (the hours DST moves); ``star_weight``
    makes ``*`` likelier, so that day fields often match a transition day.
    """
    numbers = st.integers(low, high)
    if favourites:
        numbers = st.one_of(st.sampled_from(favourites), numbers)

    def render(value: int) -> str:
        index = value - name_base
        if names and 0 <= index < len(names) and draw(st.booleans()):
            name = names[index]
            return draw(st.sampled_from([name, name.lower(), name.title()]))
        return str(value)

    kinds = ["list"] if only_lists else ["star"] * star_weight + ["step", "list", "list"]
    kind = draw(st.sampled_from(kinds))
    if kind == "star":
        return Field("*", frozenset(range(low, star_high + 1)), star=True)
    if kind == "step":
        step = draw(st.integers(2, max(2, (star_high - low) // 2)))
        return Field(f"*/{step}", frozenset(range(low, star_high + 1, step)), star=True)
    items: list[str] = []
    values: set[int] = set()
    last = False
    forms = ["value", "value", "range", "range_step"] + (["last"] if allow_last else [])
    for _ in range(draw(st.integers(1, 3))):
        form = draw(st.sampled_from(forms))
        if form == "last":
            items.append("L")
            last = True
            continue
        a = draw(numbers)
        if form == "value":
            items.append(render(a))
            values.add(a)
            continue
        b = draw(st.integers(a, high))
        if form == "range":
            items.append(f"{render(a)}-{render(b)}")
            values.update(range(a, b + 1))
        else:
            step = draw(st.integers(1, min(10, high - low + 1)))
            items.append(f"{render(a)}-{render(b)}/{step}")
            values.update(range(a, b + 1, step))
    return Field(",".join(items), frozenset(values), star=False, last=last)


@dataclass(frozen=True)
class Spec:
    text: str
    minute: Field
    hour: Field
    dom: Field
    month: Field
    dow: Field

    @property
    def wildcard(self) -> bool:
        return self.minute.star or self.hour.star

    def matches(self, wall: datetime) -> bool:
        """Vixie cron's matching, on a local wall-clock time."""
        if (
            wall.minute not in self.minute.values
            or wall.hour not in self.hour.values
            or wall.month not in self.month.values
        ):
            return False
        month_days = calendar.monthrange(wall.year, wall.month)[1]
        dom = wall.day in self.dom.values or (self.dom.last and wall.day == month_days)
        weekdays = {0 if d == 7 else d for d in self.dow.values}
        dow = wall.isoweekday() % 7 in weekdays
        return (dom and dow) if (self.dom.star or self.dow.star) else (dom or dow)

    def ever_fires(self) -> bool:
        if not (self.dom.star or self.dow.star) or self.dom.last:
            return True
        longest = {m: calendar.monthrange(2000, m)[1] for m in range(1, 13)}
        return any(d <= longest[m] for m in self.month.values for d in self.dom.values)


@st.composite
def cron_specs(draw: st.DrawFn, fixed_time: bool = False) -> Spec:
    """A cron expression; ``fixed_time`` ones have explicit minutes and hours."""
    minute = draw(fields(0, 59, 59, favourites=(0, 15, 30, 45), only_lists=fixed_time))
    # The transitions of the test zones are at local 01:00-03:00.
    hour = draw(fields(0, 23, 23, favourites=(1, 2, 3), only_lists=fixed_time))
    dom = draw(fields(1, 31, 31, allow_last=True, star_weight=3))
    month = draw(fields(1, 12, 12, names=_MONTHS, name_base=1, star_weight=3))
    # 7 (Sunday again) is written as a number: "SUN" is 0, so "SUN-SUN" is not 0-7.
    dow = draw(fields(0, 7, 6, names=_WEEKDAYS, star_weight=3))
    text = " ".join(f.text for f in (minute, hour, dom, month, dow))
    return Spec(text, minute, hour, dom, month, dow)


def _transitions(zone: str) -> list[datetime]:
    tz = ZoneInfo(zone)
    found = []
    t = at(2024, 1, 1)
    while t < at(2029, 1, 1):
        nxt = t + timedelta(hours=6)
        if t.astimezone(tz).utcoffset() != nxt.astimezone(tz).utcoffset():
            low, high = t, nxt
            while high - low > timedelta(seconds=1):
                mid = low + timedelta(seconds=(high - low).total_seconds() // 2)
                if mid.astimezone(tz).utcoffset() == nxt.astimezone(tz).utcoffset():
                    high = mid
                else:
                    low = mid
            found.append(high)
        t = nxt
    return found


TRANSITIONS = {zone: _transitions(zone) for zone in ZONES}


def test_the_properties_see_the_transitions() -> None:
    assert [len(TRANSITIONS[zone]) for zone in ZONES] == [10, 10, 10, 0, 0]
    assert at(2026, 10, 3, 15, 30) in TRANSITIONS[LORD_HOWE]


@st.composite
def zones_and_starts(draw: st.DrawFn, near: bool = False) -> tuple[str, datetime]:
    """A zone and an instant, often (``near``: always) shortly before a transition."""
    zone = draw(st.sampled_from([NEW_YORK, BERLIN, LORD_HOWE] if near else ZONES))
    # Hypothesis favours small draws, so 0 (the common case) means "near".
    if TRANSITIONS[zone] and (near or draw(st.integers(0, 3)) < 3):
        transition = draw(st.sampled_from(TRANSITIONS[zone]))
        # From a day before to three hours after (the simplest draw, 0, is a day before).
        offset = timedelta(seconds=draw(st.integers(0, 27 * 3600)))
        return zone, transition - _DAY + offset
    start = draw(
        st.datetimes(
            min_value=datetime(2024, 1, 1),
            max_value=datetime(2028, 12, 31),
            timezones=st.just(UTC),
        )
    )
    return zone, start


def _oracle(spec: Spec, zone: ZoneInfo, after: datetime, end: datetime) -> set[datetime]:
    """Every instant in (after, end] the DST rule says fires, minute by minute."""
    expected: set[datetime] = set()
    u = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    previous_offset = (u - timedelta(minutes=1)).astimezone(zone).utcoffset()
    while u <= end:
        local = u.astimezone(zone)
        offset = local.utcoffset()
        assert offset is not None and previous_offset is not None
        wall = local.replace(tzinfo=None)
        if spec.matches(wall) and (spec.wildcard or local.fold == 0):
            expected.add(u)
        if offset > previous_offset and not spec.wildcard:
            # A gap just ended at u: its wall times were (u + old offset) up to
            # (u + new offset); any matching slot there fires at u.
            start = u.replace(tzinfo=None) + previous_offset
            skipped = (offset - previous_offset) // timedelta(minutes=1)
            if any(spec.matches(start + timedelta(minutes=k)) for k in range(skipped)):
                expected.add(u)
        previous_offset = offset
        u += timedelta(minutes=1)
    return expected


@PROPERTY_SETTINGS
@given(spec=cron_specs(), zone_and_start=zones_and_starts())
def test_cron_fires_follow_the_fields_and_the_dst_rule(
    spec: Spec, zone_and_start: tuple[str, datetime]
) -> None:
    check_against_the_oracle(spec, *zone_and_start)


@PROPERTY_SETTINGS
@given(spec=cron_specs(fixed_time=True), zone_and_start=zones_and_starts(near=True))
def test_fixed_time_cron_fires_across_transitions(
    spec: Spec, zone_and_start: tuple[str, datetime]
) -> None:
    # The general property draws few fixed-time slots inside a gap or an
    # overlap; this one aims at them.
    check_against_the_oracle(spec, *zone_and_start)


def check_against_the_oracle(spec: Spec, zone_name: str, after: datetime) -> None:
    """Every property of a cron schedule's fires, for one expression, zone and start."""
    try:
        schedule = parse_schedule(spec.text, zone_name)
    except InvalidSchedule as exc:
        event("refused: never fires")
        assert "would never fire" in str(exc)
        assert not spec.ever_fires(), spec.text
        return
    assert spec.ever_fires(), spec.text
    assert isinstance(schedule, CronSchedule) and schedule.wildcard == spec.wildcard
    zone = ZoneInfo(zone_name)
    end = after + timedelta(days=2)
    within = list(schedule.fires(after, until=end))
    beyond = list(schedule.fires(end, count=3))
    assert len(beyond) == 3
    got = within + beyond
    times = [f.scheduled_for for f in got]
    assert times[0] > after
    assert all(a < b for a, b in itertools.pairwise(times))

    for fire in got:
        assert fire.scheduled_for.tzinfo is UTC
        assert fire.local.tzinfo is zone
        assert fire.local.astimezone(UTC) == fire.scheduled_for
        # The wall time exists: read back with its fold, it is the same instant.
        wall = fire.local.replace(tzinfo=None)
        again = wall.replace(tzinfo=zone, fold=fire.local.fold).astimezone(UTC)
        assert again == fire.scheduled_for
        if not spec.matches(wall):
            # Only a fixed-time slot moved out of a gap may sit off its fields.
            assert not spec.wildcard
            assert fire.note is not None and fire.note.startswith("DST gap:")
            before = (fire.scheduled_for - timedelta(seconds=1)).astimezone(zone).utcoffset()
            assert before is not None and before < fire.local.utcoffset()  # type: ignore[operator]
        if spec.wildcard:
            assert fire.note is None or fire.note.startswith("DST overlap:")
        if fire.note is not None:
            event(f"{'wildcard' if spec.wildcard else 'fixed-time'}: {fire.note[:11]}")

    if not spec.wildcard:
        walls = [f.local.replace(tzinfo=None) for f in got]
        assert len(set(walls)) == len(walls)

    if len({f.local.utcoffset() for f in within}) > 1:
        event("fires on both sides of a transition")

    # Complete and exact over two days, against the minute-by-minute oracle.
    assert [f.scheduled_for for f in within] == sorted(_oracle(spec, zone, after, end))

    # What the materializer does: ask again from each stored fire. All pairs
    # would be slow for "* * * * *"; the first ones and those around DST suffice.
    for i, (previous, fire) in enumerate(itertools.pairwise(got)):
        crossing = previous.local.utcoffset() != fire.local.utcoffset()
        if i < 20 or crossing or previous.note or fire.note:
            assert schedule.next_fire(previous.scheduled_for) == fire
    assert schedule.next_fire(after) == got[0]


_TOKENS = [
    "*",
    "*/5",
    "*/15",
    "*/0",
    "0",
    "1",
    "2",
    "7",
    "12",
    "13",
    "23",
    "24",
    "29",
    "30",
    "31",
    "59",
    "60",
    "L",
    "LW",
    "L-3",
    "L-30",
    "15W",
    "31W",
    "MON#3",
    "5#5",
    "FRIL",
    "2BD",
    "LBD",
    "H",
    "H/15",
    "H(0-29)",
    "1-5",
    "5-2",
    "MON-FRI",
    "FRI-SUN",
    "jan",
    "FEB",
    "4,6,9,11",
    "2,4",
    "0,30",
    "?",
    "#",
    "-",
    "/",
    ",",
    "@daily",
    "@hourly",
    "every",
    "15m",
    "30s",
    "fixed-delay",
]


@PROPERTY_SETTINGS
@given(
    tokens=st.integers(1, 7).flatmap(
        # Mostly five fields, so that most draws get past the field count.
        lambda n: (
            st.lists(st.sampled_from(_TOKENS), min_size=n, max_size=n)
            if n < 7
            else st.lists(st.sampled_from(_TOKENS), min_size=5, max_size=5)
        )
    ),
    zone=st.sampled_from(ZONES),
)
def test_any_tokens_either_parse_into_a_schedule_that_fires_or_are_refused(
    tokens: list[str], zone: str
) -> None:
    try:
        schedule = parse_schedule(" ".join(tokens), zone, seed="fuzz")
    except InvalidSchedule:
        event("refused")
        return
    event(f"parsed: {schedule.kind}")
    fire = schedule.next_fire(at(2026, 1, 1))
    assert fire is not None and fire.scheduled_for > at(2026, 1, 1)


@PROPERTY_SETTINGS
@given(
    text=st.text(alphabet="0123456789*/,-LHW() ?#@ \tMONJAFRIdylhurev", max_size=60),
    zone=st.sampled_from(ZONES),
)
def test_any_text_either_parses_into_a_schedule_that_fires_or_is_refused(
    text: str, zone: str
) -> None:
    try:
        schedule = parse_schedule(text, zone, seed="fuzz")
    except InvalidSchedule:
        event("refused")
        return
    event(f"parsed: {schedule.kind}")
    fire = schedule.next_fire(at(2026, 1, 1))
    assert fire is not None and fire.scheduled_for > at(2026, 1, 1)


@PROPERTY_SETTINGS
@given(
    minutes=st.integers(1, 3 * 24 * 60),
    anchor=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)
    ),
    after=st.datetimes(
        min_value=datetime(2024, 1, 1), max_value=datetime(2028, 12, 31), timezones=st.just(UTC)
    ),
    zone=st.sampled_from(ZONES),
)
def test_fixed_rate_fires_on_the_anchor_grid(
    minutes: int, anchor: datetime, after: datetime, zone: str
) -> None:
    period = timedelta(minutes=minutes)
    schedule = parse_schedule(f"every {minutes}m", zone, anchor=anchor)
    got = [f.scheduled_for for f in schedule.fires(after, count=5)]
    assert after < got[0] <= after + period
    assert all((t - anchor) % period == timedelta(0) for t in got)
    assert all(b - a == period for a, b in itertools.pairwise(got))
