"""Crons that follow a calendar (issue 45), through the API and the materializer.

``0 9 * * MON-FRI`` in Europe/Istanbul on a calendar of Turkey's 2027
public holidays, over a FakeClock year: with ``SKIP`` no occurrence falls on
a holiday; with ``NEXT_BUSINESS_DAY`` every weekday slot has its one
occurrence (the slot stays its ``scheduledFor``), and that of each weekday
holiday runs on the next business day at 09:00.

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


async def runs(crons: MemCronStore, shard: int, cron_job_id: str) -> dict[datetime, datetime]:
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
    back = await client.post(
        "/api/v1/cron-jobs",
        json={**body, "calendar": "c", "calendarPolicy": "PREVIOUS_BUSINESS_DAY"},
        headers=A,
    )
    assert back.status_code == 422 and "not available yet" in back.text
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
