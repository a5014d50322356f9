"""Crons that follow a calendar (issue 45), through the API and the materializer.

``0 9 * * MON-FRI`` in Europe/Istanbul on a calendar of Turkey's 2027
public holidays, over a FakeClock year: with ``SKIP`` no occurrence falls on
a holiday; with ``NEXT_BUSINESS_DAY`` every weekday slot has its one
occurrence (the slot stays its ``scheduledFor``), and that of each weekday
holiday runs on the next business day at 09:00; with
``PREVIOUS_BUSINESS_DAY`` on the previous one, and its occurrence exists
before that earlier run.

Turkey's 2027 public holidays, as python-holidays lists them (``Turkey``,
holidays/countries/turkey.py: Law 2429 for the fixed days; the Diyanet's
Hijri calendar for Eid al-Fitr, 9-11 March, and Eid al-Adha, 16-19 May).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta

import httpx
import pytest

from cluster.api.app import create_app
from cluster.clock import FakeClock
from cluster.leader.materializer import Materializer
from cluster.model import CronRunsParams
from cluster.store.base import CronStore
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from tests.unit.test_api_fast import A, serve, settings

pytestmark = pytest.mark.asyncio

TURKEY_2027 = [
    date(2027, 1, 1),  # Yilbasi (Fri)
    date(2027, 3, 9), date(2027, 3, 10), date(2027, 3, 11),  # Ramazan Bayrami (Tue-Thu)
    date(2027, 4, 23),  # Ulusal Egemenlik ve Cocuk Bayrami (Fri)
    date(2027, 5, 1),  # Emek ve Dayanisma Gunu (Sat)
    date(2027, 5, 16), date(2027, 5, 17), date(2027, 5, 18),  # Kurban Bayrami (Sun-Tue)
    date(2027, 5, 19),  # Kurban Bayrami, day 4; Ataturk'u Anma (Wed)
    date(2027, 7, 15),  # Demokrasi ve Milli Birlik Gunu (Thu)
    date(2027, 8, 30),  # Zafer Bayrami (Mon)
    date(2027, 10, 29),  # Cumhuriyet Bayrami (Fri)
]  # fmt: skip
ISTANBUL = timedelta(hours=3)  # UTC+3 all year since 2016
START = datetime(2026, 12, 31, 12, tzinfo=UTC)


def nine(day: date) -> datetime:
    """09:00 in Istanbul, in UTC."""
    return datetime(day.year, day.month, day.day, 9, tzinfo=UTC) - ISTANBUL


def weekdays_of_2027() -> list[date]:
    day, out = date(2027, 1, 1), []
    while day.year == 2027:
        if day.weekday() < 5:
            out.append(day)
        day += timedelta(days=1)
    return out


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def crons(clock: FakeClock) -> MemCronStore:
    return MemCronStore(MemStore(2, clock))


@pytest.fixture
async def client(crons: MemCronStore, clock: FakeClock) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings(), store=crons.store, crons=crons, clock=clock)
    async for c in serve(app):
        yield c


async def define(client: httpx.AsyncClient, name: str, policy: str | None) -> tuple[str, int]:
    body = {
        "name": name,
        "schedule": "0 9 * * MON-FRI",
        "timeZone": "Europe/Istanbul",
        "target": {"kind": "HTTP", "url": "https://hooks.example.com/run"},
        "calendar": "tr-2027",
    }
    if policy is not None:
        body["calendarPolicy"] = policy
    got = await client.post("/api/v1/cron-jobs", json=body, headers=A)
    assert got.status_code == 201, got.text
    return got.json()["cronJobId"], got.json()["shard"]


async def test_a_year_of_weekday_runs_on_turkeys_2027_holidays(
    client: httpx.AsyncClient, crons: MemCronStore, clock: FakeClock
) -> None:
    calendar = {
        "name": "tr-2027",
        "timeZone": "Europe/Istanbul",
        "excludeDates": [d.isoformat() for d in TURKEY_2027],
        "businessWeek": ["MON", "TUE", "WED", "THU", "FRI"],
    }
    assert (await client.post("/api/v1/calendars", json=calendar, headers=A)).status_code == 201
    skip_id, skip_shard = await define(client, "report-skip", None)  # SKIP is the default
    next_id, next_shard = await define(client, "report-next", "NEXT_BUSINESS_DAY")
    got = await client.get(f"/api/v1/cron-jobs/{skip_id}", headers=A)
    assert (got.json()["calendar"], got.json()["calendarPolicy"]) == ("tr-2027", "SKIP")

    # The preview explains: the first slot, 1 January, is a holiday.
    preview = await client.get(f"/api/v1/cron-jobs/{next_id}/preview?count=2", headers=A)
    first = preview.json()["fires"][0]
    assert first["scheduledFor"] == "2027-01-01T06:00:00Z"
    assert first["runAt"] == "2027-01-04T06:00:00Z"
    assert "moved to 2027-01-04 09:00" in first["note"] and "tr-2027" in first["note"]
    assert preview.json()["calendarVersion"] == 1
    preview = await client.get(f"/api/v1/cron-jobs/{skip_id}/preview?count=1", headers=A)
    note = preview.json()["fires"][0]["note"]
    assert preview.json()["fires"][0]["scheduledFor"] == "2027-01-04T06:00:00Z"
    assert "2027-01-01 09:00 skipped" in note and "excluded day" in note

    # A year of passes, each half a minute before 09:00 Istanbul.
    m = Materializer(crons, clock=clock, max_clock_skew_seconds=None)
    day = date(2027, 1, 1)
    while day.year == 2027:
        clock.set(nine(day) - timedelta(seconds=30))
        for shard in range(2):
            await m.run_once(shard)
        day += timedelta(days=1)

    holidays = set(TURKEY_2027)
    weekday_holidays = [d for d in TURKEY_2027 if d.weekday() < 5]
    assert len(weekday_holidays) == 11

    skip = await runs(crons, skip_shard, skip_id)
    assert sorted(skip) == [nine(d) for d in weekdays_of_2027() if d not in holidays]
    assert all(slot == run for slot, run in skip.items())

    moved = await runs(crons, next_shard, next_id)
    # One occurrence per slot, holidays included: the slot is its identity.
    assert sorted(moved) == [nine(d) for d in weekdays_of_2027()]
    for holiday in weekday_holidays:
        after = holiday + timedelta(days=1)
        while after in holidays or after.weekday() >= 5:
            after += timedelta(days=1)
        assert moved[nine(holiday)] == nine(after), holiday
    run_days = {(run - timedelta(hours=-3)).date() for run in moved.values()}
    assert not run_days & holidays
    assert sum(1 for s, r in moved.items() if s != r) == len(weekday_holidays)
    assert moved[nine(date(2027, 3, 9))] == nine(date(2027, 3, 12))
    assert moved[nine(date(2027, 5, 19))] == nine(date(2027, 5, 20))


def previous_business_day(day: date, holidays: set[date]) -> date:
    day -= timedelta(days=1)
    while day in holidays or day.weekday() >= 5:
        day -= timedelta(days=1)
    return day


async def test_previous_business_day_runs_each_holiday_slot_before_it_and_in_time(
    client: httpx.AsyncClient, crons: MemCronStore, clock: FakeClock
) -> None:
    calendar = {
        "name": "tr-2027",
        "timeZone": "Europe/Istanbul",
        "excludeDates": [d.isoformat() for d in TURKEY_2027],
    }
    assert (await client.post("/api/v1/calendars", json=calendar, headers=A)).status_code == 201
    cron_id, shard = await define(client, "report-prev", "PREVIOUS_BUSINESS_DAY")
    holidays = set(TURKEY_2027)
    # Where each weekday slot of 2027 runs: a holiday's on the business day
    # before it (the holidays of 9-11 March all on Monday 8 March).
    expected = {
        nine(d): nine(previous_business_day(d, holidays) if d in holidays else d)
        for d in weekdays_of_2027()
    }
    assert expected[nine(date(2027, 3, 11))] == nine(date(2027, 3, 8))

    # Passes half a minute before each 09:00: after the pass of a day, every
    # occurrence that runs that day exists (made days before its slot).
    m = Materializer(crons, clock=clock, max_clock_skew_seconds=None)
    day = date(2027, 1, 1)
    while day.year == 2027:
        clock.set(nine(day) - timedelta(seconds=30))
        await m.run_once(shard)
        made = await runs(crons, shard, cron_id)
        due = {slot for slot, run in expected.items() if run == nine(day)}
        assert due <= made.keys(), (day, sorted(due - made.keys()))
        assert all(made[slot] == nine(day) for slot in due), day
        day += timedelta(days=1)
    made = await runs(crons, shard, cron_id)
    assert made == {slot: run for slot, run in expected.items() if slot.year == 2027} | {
        slot: run for slot, run in made.items() if slot.year > 2027
    }
    assert not {(run + ISTANBUL).date() for run in made.values()} & holidays


async def test_previous_business_day_plans_ahead_of_a_later_slot_that_runs_earlier(
    client: httpx.AsyncClient, crons: MemCronStore, clock: FakeClock
) -> None:
    await plan_ahead_of_earlier_runs(client, crons, clock)


async def plan_ahead_of_earlier_runs(
    client: httpx.AsyncClient, crons: CronStore, clock: FakeClock
) -> None:
    """Two slots a day: Monday's 09:00, moved to Friday 09:00, runs before
    Friday's 17:00 slot. Planning goes past the horizon until no later slot
    can run before where it stops, so Monday's 09:00 exists by Friday 09:00.
    And a cron of Saturdays only, whose every slot moves to a Friday: from
    its creation on, it is due weeks ahead (it never settles), so its first
    Friday run exists in time. (tests/integration/test_calendar_replan_pg.py
    runs this on real shards.)"""
    clock.set(datetime(2027, 3, 3, 12, tzinfo=UTC))  # a Wednesday
    calendar = {"name": "ops", "timeZone": "UTC", "excludeDates": ["2027-03-08"]}
    assert (await client.post("/api/v1/calendars", json=calendar, headers=A)).status_code == 201
    fires: dict[str, dict[datetime, datetime]] = {}
    made_on: dict[str, int] = {}
    for name, schedule in (("twice", "0 9,17 * * *"), ("saturdays", "0 9 * * SAT")):
        body = {
            "name": name,
            "schedule": schedule,
            "timeZone": "UTC",
            "target": {"kind": "HTTP", "url": "https://hooks.example.com/run"},
            "calendar": "ops",
            "calendarPolicy": "PREVIOUS_BUSINESS_DAY",
        }
        got = await client.post("/api/v1/cron-jobs", json=body, headers=A)
        assert got.status_code == 201, got.text
        cron_id = got.json()["cronJobId"]
        made_on[cron_id] = got.json()["shard"]
        preview = await client.get(f"/api/v1/cron-jobs/{cron_id}/preview?count=20", headers=A)
        fires[cron_id] = {
            _instant(f["scheduledFor"]): _instant(f["runAt"] or f["scheduledFor"])
            for f in preview.json()["fires"]
        }
    twice, saturdays = fires
    assert fires[twice][datetime(2027, 3, 8, 9, tzinfo=UTC)] == datetime(2027, 3, 5, 9, tzinfo=UTC)
    assert fires[saturdays][datetime(2027, 3, 6, 9, tzinfo=UTC)] == datetime(
        2027, 3, 5, 9, tzinfo=UTC
    )

    m = Materializer(crons, clock=clock, max_clock_skew_seconds=None)
    at = clock.now()
    while at < datetime(2027, 3, 10, tzinfo=UTC):
        clock.set(at)
        for shard in set(made_on.values()):
            await m.run_once(shard)
        for cron_id, expected in fires.items():
            made = await runs(crons, made_on[cron_id], cron_id)
            # Whatever runs within the next minute already exists.
            for slot, run in expected.items():
                if at <= run <= at + timedelta(minutes=1):
                    assert made.get(slot) == run, (at, cron_id, slot)
        at += timedelta(minutes=30)
    made = await runs(crons, made_on[twice], twice)
    friday = datetime(2027, 3, 5, tzinfo=UTC)
    on_friday = sorted(s for s, r in made.items() if r.date() == friday.date())
    # Friday's two, Saturday's and Sunday's (weekend), and Monday's holiday.
    assert len(on_friday) == 8 and max(on_friday) == datetime(2027, 3, 8, 17, tzinfo=UTC)
    # The Saturdays' cron has made its slots up to a move's reach ahead, no more.
    made = await runs(crons, made_on[saturdays], saturdays)
    assert all(
        slot.weekday() == 5 and run == slot - timedelta(days=1) for slot, run in made.items()
    )
    assert 4 <= len(made) <= 6, sorted(made)


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def runs(crons: CronStore, shard: int, cron_job_id: str) -> dict[datetime, datetime]:
    """Each occurrence's slot and when it runs."""
    import shardmap

    found = await crons.runs(shard, CronRunsParams(shardmap.decode_id("cron", cron_job_id), 1000))
    slots = [r.scheduled_for for r in found]
    assert len(slots) == len(set(slots))  # one occurrence per (cron, slot)
    return {r.scheduled_for: r.run_at for r in found}


async def test_a_cron_must_name_an_existing_calendar_and_a_known_policy(
    client: httpx.AsyncClient,
) -> None:
    body = {
        "name": "r",
        "schedule": "0 9 * * MON-FRI",
        "timeZone": "Europe/Istanbul",
        "target": {"kind": "HTTP", "url": "https://hooks.example.com/run"},
    }
    missing = await client.post("/api/v1/cron-jobs", json={**body, "calendar": "nope"}, headers=A)
    assert missing.status_code == 422 and "no calendar named 'nope'" in missing.text
    lone = await client.post(
        "/api/v1/cron-jobs", json={**body, "calendarPolicy": "SKIP"}, headers=A
    )
    assert lone.status_code == 422 and "calendarPolicy needs a calendar" in lone.text
    cal = {"name": "c", "timeZone": "UTC"}
    assert (await client.post("/api/v1/calendars", json=cal, headers=A)).status_code == 201
    odd = await client.post(
        "/api/v1/cron-jobs", json={**body, "calendar": "c", "calendarPolicy": "LATER"}, headers=A
    )
    assert odd.status_code == 422 and "PREVIOUS_BUSINESS_DAY" in odd.json()["detail"]
    made = await client.post("/api/v1/cron-jobs", json=body, headers=A)
    cron_id = made.json()["cronJobId"]
    # PATCH: follow a calendar, then stop following it.
    patched = await client.patch(f"/api/v1/cron-jobs/{cron_id}", json={"calendar": "c"}, headers=A)
    assert patched.status_code == 200, patched.text
    assert (patched.json()["calendar"], patched.json()["calendarPolicy"]) == ("c", "SKIP")
    refused = await client.delete("/api/v1/calendars/c", headers=A)
    assert refused.status_code == 409 and "cron jobs (r)" in refused.json()["detail"]
    patched = await client.patch(f"/api/v1/cron-jobs/{cron_id}", json={"calendar": None}, headers=A)
    assert (patched.json()["calendar"], patched.json()["calendarPolicy"]) == (None, None)
    assert (await client.delete("/api/v1/calendars/c", headers=A)).status_code == 204


async def test_a_patch_of_calendar_or_policy_plans_the_moved_runs_again(
    client: httpx.AsyncClient, crons: MemCronStore, clock: FakeClock
) -> None:
    """Monday is a holiday: NEXT_BUSINESS_DAY made Monday's occurrence to
    run on Tuesday. A PATCH to SKIP cancels it; a PATCH that drops the
    calendar brings it back to its slot (past: it runs now)."""
    import shardmap

    clock.set(datetime(2027, 3, 7, 12, tzinfo=UTC))  # a Sunday
    calendar = {"name": "ops", "timeZone": "UTC", "excludeDates": ["2027-03-08"]}
    assert (await client.post("/api/v1/calendars", json=calendar, headers=A)).status_code == 201
    made: dict[str, int] = {}
    for name in ("to-skip", "to-plain"):
        body = {
            "name": name,
            "schedule": "0 9 * * MON-FRI",
            "timeZone": "UTC",
            "target": {"kind": "HTTP", "url": "https://hooks.example.com/run"},
            "calendar": "ops",
            "calendarPolicy": "NEXT_BUSINESS_DAY",
        }
        got = await client.post("/api/v1/cron-jobs", json=body, headers=A)
        assert got.status_code == 201, got.text
        made[got.json()["cronJobId"]] = got.json()["shard"]
    monday, tuesday = datetime(2027, 3, 8, 9, tzinfo=UTC), datetime(2027, 3, 9, 9, tzinfo=UTC)
    clock.set(monday - timedelta(seconds=30))
    m = Materializer(crons, clock=clock, max_clock_skew_seconds=None)
    for shard in set(made.values()):
        await m.run_once(shard)
    for cron_id, shard in made.items():
        assert await runs(crons, shard, cron_id) == {monday: tuesday}

    clock.set(monday + timedelta(hours=3))
    to_skip, to_plain = made
    patched = await client.patch(
        f"/api/v1/cron-jobs/{to_skip}", json={"calendarPolicy": "SKIP"}, headers=A
    )
    assert patched.status_code == 200, patched.text
    patched = await client.patch(f"/api/v1/cron-jobs/{to_plain}", json={"calendar": None}, headers=A)
    assert patched.status_code == 200, patched.text

    found = await crons.runs(made[to_skip], CronRunsParams(shardmap.decode_id("cron", to_skip), 9))
    assert [(r.scheduled_for, str(r.status)) for r in found] == [(monday, "CANCELLED")]
    assert await runs(crons, made[to_plain], to_plain) == {monday: monday}
