"""A calendar's change plans again the occurrences its crons have made (issue 45).

Through the API (the PUT re-plans) and the materializer, in memory on a
FakeClock: an occurrence whose day became a holiday is cancelled (SKIP) or
moved again (NEXT_BUSINESS_DAY); a slot whose day stopped being one is made;
and over the days around the changes, no slot has two occurrences and every
weekday slot the final calendar keeps has one that was not cancelled.
"""

from __future__ import annotations

import dataclasses
from datetime import date, datetime, timedelta

import httpx
import pytest

import shardmap
from cluster.clock import FakeClock
from cluster.leader.materializer import Materializer
from cluster.model import CronRunsParams, GetCronParams
from cluster.store.base import CronStore
from cluster.store.memory_cron import MemCronStore
from tests.unit.test_api_fast import A
from tests.unit.test_cron_calendars import client, clock, crons, nine

pytestmark = pytest.mark.asyncio


# The API on a MemCronStore, on a FakeClock at the end of 2026 (shared).
__all__ = ["client", "clock", "crons"]


async def put_calendar(client: httpx.AsyncClient, *holidays: date) -> int:
    body = {"timeZone": "Europe/Istanbul", "excludeDates": [d.isoformat() for d in holidays]}
    got = await client.put("/api/v1/calendars/tr", json=body, headers=A)
    assert got.status_code == 200, got.text
    return int(got.json()["version"])


async def test_edits_cancel_move_and_make_occurrences_without_doubling_any(
    client: httpx.AsyncClient, crons: MemCronStore, clock: FakeClock
) -> None:
    await edit_and_audit(client, crons, clock)


async def edit_and_audit(client: httpx.AsyncClient, crons: CronStore, clock: FakeClock) -> None:
    """The scenario and its audit, for any cron store (real shards:
    tests/integration/test_calendar_replan_pg.py)."""
    jan = {d: date(2027, 1, d) for d in range(1, 12)}
    body = {"name": "tr", "timeZone": "Europe/Istanbul", "excludeDates": ["2027-01-01"]}
    assert (await client.post("/api/v1/calendars", json=body, headers=A)).status_code == 201
    made: dict[str, tuple[str, int]] = {}
    for name, policy in (("skip", "SKIP"), ("next", "NEXT_BUSINESS_DAY")):
        got = await client.post(
            "/api/v1/cron-jobs",
            json={
                "name": name, "schedule": "0 9 * * MON-FRI", "timeZone": "Europe/Istanbul",
                "target": {"kind": "HTTP", "url": "https://hooks.example.com/x"},
                "calendar": "tr", "calendarPolicy": policy,
            },
            headers=A,
        )  # fmt: skip
        assert got.status_code == 201, got.text
        made[name] = (got.json()["cronJobId"], got.json()["shard"])
    m = Materializer(crons, clock=clock, max_clock_skew_seconds=None)

    async def day(d: date) -> None:
        clock.set(nine(d) - timedelta(seconds=30))
        for shard in range(2):
            await m.run_once(shard)

    async def runs(name: str) -> dict[datetime, tuple[datetime, str]]:
        cron_id, shard = made[name]
        found = await crons.runs(shard, CronRunsParams(shardmap.decode_id("cron", cron_id), 500))
        slots = [r.scheduled_for for r in found]
        assert len(slots) == len(set(slots)), name  # never two occurrences of a slot
        return {r.scheduled_for: (r.run_at, r.status) for r in found}

    await day(jan[1])  # Friday, a holiday: NEXT makes it for Monday the 4th
    assert (await runs("next"))[nine(jan[1])] == (nine(jan[4]), "SCHEDULED")
    assert nine(jan[1]) not in await runs("skip")

    # Monday the 4th becomes a holiday too: the moved run moves on to Tuesday.
    await put_calendar(client, jan[1], jan[4])
    assert (await runs("next"))[nine(jan[1])] == (nine(jan[5]), "SCHEDULED")

    # Tuesday the 5th: both crons make its slot; then the 5th becomes a
    # holiday half a minute before 09:00. SKIP cancels its occurrence; NEXT
    # moves both it and the 1st's to Wednesday.
    await day(jan[5])
    assert (await runs("skip"))[nine(jan[5])] == (nine(jan[5]), "SCHEDULED")
    await put_calendar(client, jan[1], jan[4], jan[5])
    assert (await runs("skip"))[nine(jan[5])][1] == "CANCELLED"
    nxt = await runs("next")
    assert nxt[nine(jan[1])] == (nine(jan[6]), "SCHEDULED")
    assert nxt[nine(jan[5])] == (nine(jan[6]), "SCHEDULED")

    # Wednesday the 6th: the calendar's makers change their mind at 08:59:30
    # on Thursday: Thursday the 7th was skipped by SKIP's materializer...
    await day(jan[6])
    await put_calendar(client, jan[1], jan[4], jan[5], jan[7])
    await day(jan[7])
    assert nine(jan[7]) not in await runs("skip")
    # ...and is a business day again: its slot is made, once.
    version = await put_calendar(client, jan[1], jan[4], jan[5])
    assert version == 5  # 1 made, then 4 changes
    assert (await runs("skip"))[nine(jan[7])] == (nine(jan[7]), "SCHEDULED")
    assert (await runs("next"))[nine(jan[7])] == (nine(jan[7]), "SCHEDULED")
    await put_calendar(client, jan[1], jan[4], jan[5])  # the same days: nothing to do
    for d in (8, 11):
        await day(jan[d])

    # The audit: every weekday slot the final calendar keeps has exactly one
    # live occurrence, and no live occurrence runs on a holiday.
    holidays = {jan[1], jan[4], jan[5]}
    weekdays = [jan[d] for d in range(1, 12) if jan[d].weekday() < 5]
    skip, nxt = await runs("skip"), await runs("next")
    live_skip = {s for s, (_, status) in skip.items() if status != "CANCELLED"}
    assert live_skip == {nine(d) for d in weekdays if d not in holidays}
    assert set(nxt) == {nine(d) for d in weekdays}
    assert all(status == "SCHEDULED" for _, status in nxt.values())
    for slot, (run_at, _) in nxt.items():
        assert (run_at + timedelta(hours=3)).date() not in holidays, slot


async def test_a_materializer_holding_the_old_version_writes_nothing(
    client: httpx.AsyncClient, crons: MemCronStore, clock: FakeClock
) -> None:
    # The moment of the race, made to last: the shard's copy still says
    # version 1 (what a pass read before the change) while the change has
    # already held the cron for version 2. The pass loses its compare-and-set
    # and writes nothing; once it reads version 2 it plans by it.
    body = {"name": "tr", "timeZone": "Europe/Istanbul"}
    assert (await client.post("/api/v1/calendars", json=body, headers=A)).status_code == 201
    got = await client.post(
        "/api/v1/cron-jobs",
        json={
            "name": "r", "schedule": "0 9 * * MON-FRI", "timeZone": "Europe/Istanbul",
            "target": {"kind": "HTTP", "url": "https://hooks.example.com/x"}, "calendar": "tr",
        },
        headers=A,
    )  # fmt: skip
    cron_id, shard = shardmap.decode_id("cron", got.json()["cronJobId"]), got.json()["shard"]
    old = await crons.get_calendar(shard, "svc-a", "tr")
    assert old is not None and old.version == 1
    await crons.hold_calendar_version(shard, cron_id, "tr", 2)
    m = Materializer(crons, clock=clock, max_clock_skew_seconds=None)
    clock.set(nine(date(2027, 1, 1)) - timedelta(seconds=30))
    await m.run_once(shard)
    assert await crons.runs(shard, CronRunsParams(cron_id, 10)) == []
    holiday = dataclasses.replace(old.body, exclude_dates=(date(2027, 1, 1),))
    await crons.put_calendar(shard, dataclasses.replace(old, version=2, body=holiday))
    await m.run_once(shard)
    # Version 2 skips Friday the 1st: still nothing, and the cursor moved on.
    assert await crons.runs(shard, CronRunsParams(cron_id, 10)) == []
    saved = await crons.get(shard, GetCronParams(cron_id, "svc-a"))
    assert saved is not None and saved.next_fire_at == nine(date(2027, 1, 4))
