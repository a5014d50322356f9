"""The calendar contract (issue 45): each shard's copy, on MemCronStore and PgCronStore.

A copy moves only forward (a greater (version, fingerprint) replaces it,
a lesser write returns what is held), deletions are versions, lists are by
name and hold tombstones, and a cron's calendar is found by name.
"""

from __future__ import annotations

import dataclasses
from datetime import date, timedelta

import pytest

from cluster.cron.calendar_rules import calendar_body
from cluster.model import CalendarRecord, DueCronsParams
from tests.contract.test_cron_store_contract import (
    OWNER,
    CronHarness,
    advance,
    ch,
    cron,
    get,
    occ,
    write,
)

__all__ = ["ch"]

pytestmark = pytest.mark.asyncio

TURKEY = calendar_body(
    time_zone="Europe/Istanbul",
    exclude_dates=["2027-01-01", "2027-04-23"],
    include_dates=["2027-01-09"],
    business_week=["MON", "TUE", "WED", "THU", "FRI"],
)


def record(name: str = "tr", version: int = 1, **over: object) -> CalendarRecord:
    base = CalendarRecord(OWNER, name, version, TURKEY)
    return dataclasses.replace(base, **over)  # type: ignore[arg-type]


async def test_a_copy_round_trips_and_moves_only_forward(ch: CronHarness) -> None:
    first = await ch.crons.put_calendar(0, record())
    assert first.version == 1 and first.body == TURKEY and not first.deleted
    assert first.body.exclude_dates == (date(2027, 1, 1), date(2027, 4, 23))
    assert first.created_at is not None
    got = await ch.crons.get_calendar(0, OWNER, "tr")
    assert got == first
    # Only shard 0 was written: each shard holds its own copy.
    assert await ch.crons.get_calendar(1, OWNER, "tr") is None
    assert await ch.crons.get_calendar(0, "other", "tr") is None

    newer = dataclasses.replace(
        record(version=2), body=dataclasses.replace(TURKEY, exclude_dates=())
    )
    assert (await ch.crons.put_calendar(0, newer)).version == 2
    # A late write of version 1 changes nothing and says what is held.
    held = await ch.crons.put_calendar(0, record(version=1))
    assert held.version == 2 and held.body.exclude_dates == ()


async def test_one_version_written_twice_converges_on_the_greater_fingerprint(
    ch: CronHarness,
) -> None:
    a = record(version=3)
    b = dataclasses.replace(a, body=dataclasses.replace(TURKEY, description="b"))
    winner = max(a, b, key=lambda c: c.order)
    await ch.crons.put_calendar(0, a)
    await ch.crons.put_calendar(0, b)
    await ch.crons.put_calendar(1, b)
    await ch.crons.put_calendar(1, a)
    for shard in (0, 1):
        got = await ch.crons.get_calendar(shard, OWNER, "tr")
        assert got is not None and got.body == winner.body


async def test_a_tombstone_is_a_version_and_lists_keep_it(ch: CronHarness) -> None:
    await ch.crons.put_calendar(0, record("b"))
    await ch.crons.put_calendar(0, record("a"))
    await ch.crons.put_calendar(0, record("c", version=2, deleted=True))
    names = [(c.name, c.deleted) for c in await ch.crons.list_calendars(0, OWNER)]
    assert names == [("a", False), ("b", False), ("c", True)]
    page = await ch.crons.list_calendars(0, OWNER, after="a", limit=1)
    assert [c.name for c in page] == ["b"]
    # A late version 1 of the deleted one does not bring it back.
    assert (await ch.crons.put_calendar(0, record("c"))).deleted


async def test_crons_that_follow_a_calendar_are_found_by_name(ch: CronHarness) -> None:
    for name, calendar in (("x", "tr"), ("y", "tr"), ("z", None), ("w", "other")):
        c = cron(ch, name, calendar=calendar, calendar_policy="SKIP" if calendar else None)
        await ch.crons.create(0, c)
    assert await ch.crons.crons_on_calendar(0, OWNER, "tr") == ["x", "y"]
    assert await ch.crons.crons_on_calendar(0, OWNER, "tr", limit=1) == ["x"]
    assert await ch.crons.crons_on_calendar(0, "someone", "tr") == []
    saved = await ch.crons.get_calendar(0, OWNER, "nope")
    assert saved is None


async def test_a_due_cron_says_which_calendar_it_follows(ch: CronHarness) -> None:
    # What the materializer reads to find the shard's copy: owner and name.
    await ch.crons.create(
        0, cron(ch, "x", at=1, calendar="tr", calendar_policy="NEXT_BUSINESS_DAY")
    )
    await ch.crons.create(0, cron(ch, "y", at=2))
    until = ch.now() + timedelta(seconds=10)
    page = await ch.crons.due(0, DueCronsParams(until=until))
    found = {(c.owner, c.calendar, c.calendar_policy) for c in page}
    assert found == {(OWNER, "tr", "NEXT_BUSINESS_DAY"), (OWNER, None, None)}


async def test_a_write_planned_by_an_older_calendar_version_loses_once_a_change_holds_a_newer(
    ch: CronHarness,
) -> None:
    follows = cron(ch, "f", at=30, calendar="tr", calendar_policy="SKIP")
    plain = cron(ch, "p", at=30)
    other = cron(ch, "o", at=30, calendar="tr", calendar_policy="SKIP")
    for c in (follows, plain, other):
        await ch.crons.create(0, c)
    await ch.crons.hold_calendar_version(0, follows.id, "tr", 3)
    await ch.crons.hold_calendar_version(0, follows.id, "tr", 2)  # never a step back
    # A hold for another calendar than the one the cron follows holds nothing.
    await ch.crons.hold_calendar_version(0, other.id, "elsewhere", 9)
    assert follows.next_fire_at is not None
    first = advance(follows, occ(follows, follows.next_fire_at))
    stale = dataclasses.replace(first, calendar_version=2)
    assert (await write(ch, stale)).advanced == frozenset()
    assert (await get(ch, follows)).next_fire_at == follows.next_fire_at
    fresh = dataclasses.replace(stale, calendar_version=3)
    unrelated = [advance(plain), dataclasses.replace(advance(other), calendar_version=1)]
    result = await write(ch, fresh, *unrelated)
    assert result.advanced == {follows.id, plain.id, other.id} and result.created == 1
