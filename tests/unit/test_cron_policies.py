"""A cron's month-end and DST policies, and its bounds (startAt, endAt,
maxRuns): pure schedule math and planning, no database."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cluster.clock import FakeClock
from cluster.cron.definition import first_slot
from cluster.cron.firing import Fire
from cluster.cron.plan import exhausted, plan, schedule_of
from cluster.cron.schedule import InvalidSchedule, parse_schedule
from cluster.cron.wall_clock import DST_POLICIES
from cluster.leader.materializer import Materializer
from cluster.model import ClaimParams, CronRecord, FinishParams, GetCronParams, JobResult, Outcome
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from tests.helpers import cron_record


def utc(year: int, month: int, day: int, hour: int = 0) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


def local_days(fires: list[Fire]) -> list[str]:
    return [f"{f.local:%Y-%m-%d %H:%M}" for f in fires]


# -- month end -----------------------------------------------------------------


def test_skip_is_cron_rule_the_31st_fires_only_in_months_that_have_one() -> None:
    s = parse_schedule("0 2 31 * *", "Europe/Istanbul")
    fires = list(s.fires(utc(2027, 1, 1), count=4))
    assert local_days(fires) == [
        "2027-01-31 02:00", "2027-03-31 02:00", "2027-05-31 02:00", "2027-07-31 02:00",
    ]  # fmt: skip
    assert all(f.note is None for f in fires)


def test_clamp_fires_on_the_last_day_of_february_and_april() -> None:
    s = parse_schedule("0 2 31 * *", "Europe/Istanbul", month_end="CLAMP")
    fires = list(s.fires(utc(2027, 1, 1), count=5))
    assert local_days(fires) == [
        "2027-01-31 02:00", "2027-02-28 02:00", "2027-03-31 02:00", "2027-04-30 02:00",
        "2027-05-31 02:00",
    ]  # fmt: skip
    notes = {f"{f.local:%m}": f.note for f in fires}
    assert notes["01"] is None and notes["03"] is None
    assert notes["02"] is not None and "February 2027 has no 31st" in notes["02"]
    assert notes["04"] is not None and "fired on the 30th" in notes["04"]


def test_clamp_in_a_leap_year_and_several_missing_days_fire_once() -> None:
    # 29, 30 and 31 all missing in February 2027 fire once, on the 28th; the
    # 29th exists in February 2028 and fires there (30, 31 clamp onto it, once).
    s = parse_schedule("0 9 29,30,31 * *", "UTC", month_end="CLAMP")
    feb27 = list(s.fires(utc(2027, 2, 1), until=utc(2027, 3, 1)))
    assert local_days(feb27) == ["2027-02-28 09:00"]
    assert feb27[0].note is not None and "29th, 30th, 31st" in feb27[0].note
    feb28 = list(s.fires(utc(2028, 2, 1), until=utc(2028, 3, 1)))
    assert local_days(feb28) == ["2028-02-29 09:00"]


def test_clamp_leaves_a_day_of_week_restricted_schedule_to_its_weekdays() -> None:
    # "31 or Friday" (Vixie: both day fields restricted, either suffices): in
    # April the 30th comes by the clamp, Fridays as always.
    s = parse_schedule("0 2 31 * FRI", "UTC", month_end="CLAMP")
    april = local_days(list(s.fires(utc(2027, 4, 1), until=utc(2027, 5, 1))))
    assert "2027-04-30 02:00" in april and "2027-04-02 02:00" in april


def test_clamp_changes_nothing_for_unrestricted_days() -> None:
    a = parse_schedule("0 2 * * *", "UTC")
    b = parse_schedule("0 2 * * *", "UTC", month_end="CLAMP")
    start = utc(2027, 1, 25)
    assert list(a.fires(start, count=40)) == list(b.fires(start, count=40))


# -- DST -----------------------------------------------------------------------

# Europe/Berlin: 2027-03-28 02:00 -> 03:00 (gap), 2027-10-31 03:00 -> 02:00 (overlap).
# America/New_York: 2027-03-14 02:00 -> 03:00, 2027-11-07 02:00 -> 01:00.


@pytest.mark.parametrize(
    ("zone", "expression", "day"),
    [("Europe/Berlin", "30 2 * * *", 28), ("America/New_York", "30 2 * * *", 14)],
)
def test_gap_cronie_fires_at_the_end_of_the_gap_skip_does_not_fire(
    zone: str, expression: str, day: int
) -> None:
    start = utc(2027, 3, day - 1, 12)
    cronie = list(parse_schedule(expression, zone).fires(start, count=2))
    skip = list(parse_schedule(expression, zone, dst="SKIP").fires(start, count=2))
    assert local_days(cronie) == [f"2027-03-{day:02d} 03:00", f"2027-03-{day + 1:02d} 02:30"]
    assert cronie[0].note is not None and cronie[0].note.startswith("DST gap")
    # SKIP: no firing on the transition day; the next day as usual, and the
    # next firing says what was dropped (the preview shows the policy).
    assert local_days(skip) == [f"2027-03-{day + 1:02d} 02:30", f"2027-03-{day + 2:02d} 02:30"]
    assert skip[0].note == f"DST gap on 2027-03-{day:02d}: 02:30 did not exist; not fired (dstPolicy SKIP)"
    assert skip[1].note is None
    # The slots the materializer gets are the same without the notes.
    assert parse_schedule(expression, zone, dst="SKIP").next_fire(start) == skip[0]


def test_skip_drops_only_the_missing_slot_of_a_transition_day() -> None:
    # 02:00 and 02:30 are dropped; the real 03:00 slot, at the gap's end,
    # fires and carries the note.
    schedule = parse_schedule("0,30 2-3 * * *", "Europe/Berlin", dst="SKIP")
    fires = list(schedule.fires(utc(2027, 3, 27, 12), count=3))
    assert local_days(fires) == ["2027-03-28 03:00", "2027-03-28 03:30", "2027-03-29 02:00"]
    assert fires[0].note is not None and "02:00, 02:30 did not exist; not fired" in fires[0].note


@pytest.mark.parametrize(
    ("zone", "expression", "month", "day", "first", "second"),
    [
        ("Europe/Berlin", "30 2 * * *", 10, 31, "CEST", "CET"),
        ("America/New_York", "30 1 * * *", 11, 7, "EDT", "EST"),
    ],
)
def test_overlap_cronie_fires_the_first_time_both_fires_twice(
    zone: str, expression: str, month: int, day: int, first: str, second: str
) -> None:
    start = utc(2027, month, day - 1, 12)
    until = start + timedelta(days=1)
    cronie = list(parse_schedule(expression, zone).fires(start, until=until))
    both = list(parse_schedule(expression, zone, dst="BOTH").fires(start, until=until))
    assert len(cronie) == 1 and cronie[0].local.tzname() == first
    assert [f.local.tzname() for f in both] == [first, second]
    assert both[1].scheduled_for - both[0].scheduled_for == timedelta(hours=1)
    assert all(f.note is not None and "DST overlap" in f.note for f in both)


def test_policies_leave_wildcard_schedules_alone() -> None:
    # A wildcard schedule has no slots in a gap and fires at each real
    # occurrence in an overlap, whatever the policy.
    start, until = utc(2027, 10, 30, 12), utc(2027, 10, 31, 12)
    for dst in DST_POLICIES:
        fires = list(parse_schedule("*/30 2 * * *", "Europe/Berlin", dst=dst).fires(start, until=until))
        assert len(fires) == 4, dst


def test_unknown_policies_are_refused() -> None:
    with pytest.raises(InvalidSchedule, match="monthEndPolicy"):
        parse_schedule("0 2 * * *", "UTC", month_end="LAST")  # type: ignore[arg-type]
    with pytest.raises(InvalidSchedule, match="dstPolicy"):
        parse_schedule("0 2 * * *", "UTC", dst="TWICE")  # type: ignore[arg-type]


# -- bounds ----------------------------------------------------------------------

T0 = utc(2027, 1, 10, 10)


def hourly(**over: Any) -> CronRecord:
    over.setdefault("next_fire_at", T0)
    over.setdefault("misfire_policy", "RUN_ALL")
    return cron_record("svc", "bounded", **over)


def run(c: CronRecord, now: datetime, lookahead: timedelta = timedelta(minutes=1)) -> Any:
    return plan(
        c, schedule_of(c), now, pending=0, lookahead=lookahead,
        misfire_threshold=timedelta(minutes=1), catchup_cap=100,
    )  # fmt: skip


def test_first_slot_honours_start_at_and_end_at() -> None:
    s = parse_schedule("0 * * * *", "UTC")
    assert first_slot(s, T0, None, None) == T0 + timedelta(hours=1)
    # A slot at startAt itself counts.
    assert first_slot(s, T0, T0 + timedelta(hours=5), None) == T0 + timedelta(hours=5)
    assert first_slot(s, T0, T0 + timedelta(hours=5, minutes=1), None) == T0 + timedelta(hours=6)
    assert first_slot(s, T0, None, T0 + timedelta(minutes=30)) is None


def test_end_at_stops_the_plan_and_ends_the_cron() -> None:
    c = hourly(end_at=T0 + timedelta(hours=2))
    # Down for 5 hours: only the slots up to endAt run; then the cron is done.
    p = run(c, T0 + timedelta(hours=5))
    assert [o.scheduled_for for o in p.occurrences] == [T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2)]
    assert p.next_fire_at is None
    # On time: the slot before endAt is made, and next_fire_at moves on.
    p = run(c, T0 - timedelta(seconds=30))
    assert [o.scheduled_for for o in p.occurrences] == [T0]
    assert p.next_fire_at == T0 + timedelta(hours=1)


def test_max_runs_caps_occurrences_across_passes() -> None:
    c = hourly(max_runs=3)
    p = run(c, T0 + timedelta(hours=1, seconds=30), lookahead=timedelta(minutes=1))
    assert p.runs == 2 and p.next_fire_at == T0 + timedelta(hours=2)
    after = dataclasses.replace(c, next_fire_at=p.next_fire_at, run_count=c.run_count + p.runs)
    p2 = run(after, T0 + timedelta(hours=5))
    assert p2.runs == 1 and p2.next_fire_at is None  # the third and last
    done = dataclasses.replace(after, run_count=3, next_fire_at=T0 + timedelta(hours=6))
    assert exhausted(done)
    p3 = run(done, T0 + timedelta(hours=6))
    assert p3.runs == 0 and p3.next_fire_at is None


def test_missed_slots_do_not_count_as_runs() -> None:
    c = hourly(max_runs=2, misfire_policy="SKIP")
    # Down 3 hours under SKIP: three slots missed, the on-time one runs, and
    # one run of the two is left.
    p = run(c, T0 + timedelta(hours=3))
    assert p.missed == 3 and [o.scheduled_for for o in p.occurrences] == [T0 + timedelta(hours=3)]
    assert p.next_fire_at == T0 + timedelta(hours=4)


def test_the_materializer_stops_a_fixed_delay_cron_at_max_runs() -> None:
    # Fixed delay: each occurrence is planned from the last one's finish
    # (the restart path sets next_fire_at again after every run); the cron
    # still stops at maxRuns, with next_fire_at NULL.
    clock = FakeClock(T0)
    crons = MemCronStore(MemStore(1, clock))
    c = cron_record(
        "svc", "fd", schedule="every 10m fixed-delay", schedule_kind="FIXED_DELAY",
        next_fire_at=T0, max_runs=2,
    )  # fmt: skip
    asyncio.run(crons.create_many(0, [c]))
    m = Materializer(crons, clock=clock, max_clock_skew_seconds=None)

    async def finish_all() -> None:
        store = crons.store
        now = clock.now()
        while claimed := await store.claim_jobs(0, ClaimParams("w", 100, 60, 0, now=now)):
            results = tuple(JobResult(j.lease, Outcome.SUCCEEDED, "w", now, 0.0) for j in claimed)
            await store.finish_jobs(0, FinishParams(results, now=now))

    made = 0
    for _ in range(5):
        made += asyncio.run(m.run_once(0))
        asyncio.run(finish_all())
        clock.advance(timedelta(minutes=11))
    saved = asyncio.run(crons.get(0, GetCronParams(c.id, "svc")))
    assert saved is not None
    assert made == 2 and saved.run_count == 2 and saved.next_fire_at is None
