"""Misfire, deadline and concurrency rules of the materializer's plan, with a
fake "now": no database, no sleeping."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import shardmap
from cluster.clock import FakeClock
from cluster.cron.plan import Plan, ScheduleCache, cron_slot, plan, schedule_of
from cluster.leader.materializer import Materializer
from cluster.model import CronRecord
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from tests.helpers import cron_record

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
LOOKAHEAD = timedelta(seconds=60)
THRESHOLD = timedelta(seconds=60)


def cron(schedule: str = "0 * * * *", **over: Any) -> CronRecord:
    over.setdefault("payload", {})
    over.setdefault("misfire_policy", "RUN_ALL")
    over.setdefault("fingerprint", "f")
    name = over.pop("name", "c")
    over.setdefault("type", "c")
    return cron_record(
        over.pop("owner", "svc"), name, next_fire_at=over.pop("next_fire_at", T0), schedule=schedule, **over
    )


def run(c: CronRecord, now: datetime, pending: int = 0, cap: int = 100) -> Plan:
    return plan(c, schedule_of(c), now, pending=pending, lookahead=LOOKAHEAD, misfire_threshold=THRESHOLD, catchup_cap=cap)


def test_on_time_slot_is_materialized_ahead() -> None:
    p = run(cron(), T0 - timedelta(seconds=30))
    assert [o.scheduled_for for o in p.occurrences] == [T0]
    assert p.next_fire_at == T0 + timedelta(hours=1) and p.missed == 0


def test_nothing_before_lookahead() -> None:
    p = run(cron(), T0 - timedelta(minutes=5))
    assert p.occurrences == [] and p.next_fire_at == T0


# A 2-hour outage: the hourly cron was due at 10:00 and 11:00; it is now 12:00:30
# (the 12:00 slot is within the misfire threshold, so it is on time, not missed).
OUTAGE_NOW = T0 + timedelta(hours=2, seconds=30)


def test_run_all_runs_each_missed_slot() -> None:
    p = run(cron(misfire_policy="RUN_ALL"), OUTAGE_NOW)
    assert [o.scheduled_for for o in p.occurrences] == [T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2)]
    assert p.missed == 0 and p.next_fire_at == T0 + timedelta(hours=3)


def test_run_all_is_capped_and_counts_the_rest() -> None:
    # Every 15 minutes for 2 hours: 8 missed slots, cap 3 keeps the latest 3.
    p = run(cron("*/15 * * * *", misfire_policy="RUN_ALL"), OUTAGE_NOW, cap=3)
    late = [o.scheduled_for for o in p.occurrences]
    assert late == [T0 + timedelta(minutes=m) for m in (75, 90, 105)] + [T0 + timedelta(hours=2)]
    assert p.missed_misfire == 5


def test_run_once_runs_only_the_latest_missed() -> None:
    p = run(cron(misfire_policy="RUN_ONCE"), OUTAGE_NOW)
    assert [o.scheduled_for for o in p.occurrences] == [T0 + timedelta(hours=1), T0 + timedelta(hours=2)]
    assert p.missed_misfire == 1


def test_skip_waits_for_the_next_slot() -> None:
    p = run(cron(misfire_policy="SKIP"), OUTAGE_NOW)
    assert [o.scheduled_for for o in p.occurrences] == [T0 + timedelta(hours=2)]
    assert p.missed_misfire == 2


def test_starting_deadline_drops_late_occurrences() -> None:
    p = run(cron(misfire_policy="RUN_ALL", starting_deadline_seconds=600), OUTAGE_NOW)
    assert [o.scheduled_for for o in p.occurrences] == [T0 + timedelta(hours=2)]
    assert p.missed_deadline == 2
    assert p.occurrences[0].deadline_at == T0 + timedelta(hours=2, seconds=600)


def test_forbid_skips_due_slots_while_previous_pending() -> None:
    p = run(cron(concurrency="FORBID"), T0 + timedelta(seconds=5), pending=1)
    assert p.occurrences == [] and p.skipped == 1
    assert p.next_fire_at == T0 + timedelta(hours=1)


def test_forbid_waits_for_future_slot_while_previous_pending() -> None:
    p = run(cron(concurrency="FORBID"), T0 - timedelta(seconds=30), pending=1)
    assert p.occurrences == [] and p.skipped == 0 and p.next_fire_at == T0


def test_forbid_creates_one_at_a_time() -> None:
    p = run(cron(concurrency="FORBID", misfire_policy="RUN_ALL"), OUTAGE_NOW)
    assert [o.scheduled_for for o in p.occurrences] == [T0]
    assert p.skipped == 2  # 11:00 and 12:00 came while 10:00 is pending


def test_jitter_is_stable_per_cron() -> None:
    c = cron(jitter_seconds=300)
    a = run(c, T0).occurrences[0]
    b = run(dataclasses.replace(c, next_fire_at=T0 + timedelta(days=1)), T0 + timedelta(days=1)).occurrences[0]
    offset = a.run_at - a.scheduled_for
    assert timedelta(0) <= offset < timedelta(seconds=300)
    assert b.run_at - b.scheduled_for == offset  # the same second every day
    assert shardmap.slot_of(a.job_id) == shardmap.slot_of(c.id)  # lives on the cron's shard


def test_fixed_delay_one_occurrence_then_waits() -> None:
    c = cron("every 10m fixed-delay", schedule_kind="FIXED_DELAY")
    p = run(c, T0)
    assert len(p.occurrences) == 1 and p.next_fire_at is None


def test_fixed_rate_has_no_drift() -> None:
    c = cron("every 15m", schedule_kind="FIXED_RATE", next_fire_at=T0 + timedelta(minutes=15))
    p = run(c, T0 + timedelta(minutes=15))
    assert p.occurrences[0].scheduled_for == T0 + timedelta(minutes=15)
    assert p.next_fire_at == T0 + timedelta(minutes=30)


@pytest.mark.parametrize("policy", ["RUN_ALL", "RUN_ONCE", "SKIP"])
def test_very_long_outage_terminates(policy: str) -> None:
    c = cron("* * * * *", misfire_policy=policy)
    p = run(c, T0 + timedelta(days=60), cap=100)
    assert len(p.occurrences) <= 102
    assert p.next_fire_at is not None and p.next_fire_at > T0 + timedelta(days=60)
    assert p.missed > 0


# -- schedules shared by many crons ------------------------------------------------------------------


def test_schedule_cache_parses_a_shared_schedule_once_and_keeps_h_per_cron() -> None:
    cache = ScheduleCache()
    a, b = cron("0 0 * * *", name="a"), cron("0 0 * * *", id=shardmap.new_uuid(cron_slot("svc", "b")))
    assert cache.slots(a) is cache.slots(b)  # one parse for a round-hour schedule
    assert cache.slots(a).next_fire(T0) == schedule_of(a).next_fire(T0)
    # H depends on the cron id: each H cron keeps its own minute.
    ids = [shardmap.new_uuid(cron_slot("svc", f"h{i}")) for i in range(40)]
    hashed = [cron("H 3 * * *", id=i) for i in ids]
    minutes = set()
    for c in hashed:
        fire = cache.slots(c).next_fire(T0)
        assert fire == schedule_of(c).next_fire(T0)
        assert fire is not None
        minutes.add(fire.scheduled_for.minute)
    assert len(minutes) > 1
    # The zone and the anchor are part of what a schedule means.
    assert cache.slots(cron("0 0 * * *", time_zone="Asia/Tokyo")) is not cache.slots(a)


def test_plan_through_the_cache_equals_plan_through_the_schedule() -> None:
    cache = ScheduleCache()
    for policy in ("RUN_ALL", "RUN_ONCE", "SKIP"):
        c = cron("*/15 * * * *", misfire_policy=policy, jitter_seconds=300)
        direct = run(c, OUTAGE_NOW, cap=3)
        cached = plan(c, cache.slots(c), OUTAGE_NOW, pending=0, lookahead=LOOKAHEAD,
                      misfire_threshold=THRESHOLD, catchup_cap=3)  # fmt: skip
        assert [o.scheduled_for for o in cached.occurrences] == [o.scheduled_for for o in direct.occurrences]
        assert [o.run_at for o in cached.occurrences] == [o.run_at for o in direct.occurrences]
        assert (cached.next_fire_at, cached.missed, cached.skipped) == (direct.next_fire_at, direct.missed, direct.skipped)


# -- the materializer over the memory store: horizon and pass budget ---------------------------------


def wave(store: MemCronStore, n: int, at: datetime, shard: int = 0) -> list[CronRecord]:
    crons = [
        cron("0 0 * * *", id=shardmap.new_uuid(cron_slot("svc", f"w{i}")), name=f"w{i}", next_fire_at=at)
        for i in range(n)
    ]
    asyncio.run(store.create_many(shard, crons))
    return crons


MIDNIGHT = datetime(2026, 12, 1, tzinfo=UTC)


def test_a_large_instant_is_started_before_the_lookahead() -> None:
    clock = FakeClock(MIDNIGHT - timedelta(seconds=300))
    crons = MemCronStore(MemStore(1, clock))
    wave(crons, 3000, MIDNIGHT)
    m = Materializer(crons, clock=clock, initial_rate=30.0, page_size=500)
    # 3,000 crons at 30/s, written in 15 s passes 5 s apart (22.5/s): 133 s
    # of work, 215 s with the margins. 300 s ahead is still early, 200 s is not.
    assert asyncio.run(m.horizon(0, clock.now())) == clock.now() + LOOKAHEAD
    assert asyncio.run(m.run_once(0)) == 0
    clock.set(MIDNIGHT - timedelta(seconds=200))
    assert asyncio.run(m.horizon(0, clock.now())) >= MIDNIGHT
    assert asyncio.run(m.run_once(0)) == 3000
    # A handful of crons at one instant waits for the ordinary lookahead.
    wave(crons, 10, MIDNIGHT + timedelta(hours=1))
    clock.set(MIDNIGHT + timedelta(hours=1) - timedelta(seconds=200))
    assert asyncio.run(m.run_once(0)) == 0


def test_the_rate_is_learned_and_shared_by_the_shards_a_process_leads() -> None:
    clock = FakeClock(MIDNIGHT - timedelta(seconds=30))
    crons = MemCronStore(MemStore(2, clock))
    wave(crons, 1200, MIDNIGHT, shard=0)
    m = Materializer(crons, clock=clock, initial_rate=1000.0, page_size=600)
    asyncio.run(m.run_once(0))
    one = m.rate(0)
    assert one != 1000.0 * m.pass_budget / (m.pass_budget + m.interval)  # learned from the pages
    asyncio.run(m.run_once(1))
    assert m.rate(0) == pytest.approx(one / 2)


def test_a_pass_stops_after_its_budget_and_the_next_goes_on() -> None:
    clock = FakeClock(MIDNIGHT - timedelta(seconds=30))
    crons = MemCronStore(MemStore(1, clock))
    wave(crons, 900, MIDNIGHT)
    m = Materializer(crons, clock=clock, page_size=100, pass_budget_seconds=0.0)
    # A zero budget: one page per pass, the earliest first.
    assert asyncio.run(m.run_once(0)) == 100
    assert asyncio.run(m.run_once(0)) == 100
    total = 200
    while n := asyncio.run(m.run_once(0)):
        total += n
    assert total == 900


def test_every_policy_in_one_page_of_the_memory_store() -> None:
    clock = FakeClock(OUTAGE_NOW)
    crons = MemCronStore(MemStore(1, clock))
    made = {
        (policy, concurrency): cron("*/15 * * * *", id=shardmap.new_uuid(cron_slot("svc", f"{policy}{concurrency}")),
                                    name=f"{policy}{concurrency}", misfire_policy=policy, concurrency=concurrency)
        for policy in ("RUN_ALL", "RUN_ONCE", "SKIP") for concurrency in ("ALLOW", "FORBID")
    }  # fmt: skip
    asyncio.run(crons.create_many(0, list(made.values())))
    m = Materializer(crons, clock=clock, catchup_cap=3)
    asyncio.run(m.run_once(0))
    store = crons.store
    per_cron: dict[object, int] = {}
    for row in store._shard(0).rows.values():
        per_cron[row.job.cron_id] = per_cron.get(row.job.cron_id, 0) + 1
    counts = {key: per_cron.get(c.id, 0) for key, c in made.items()}
    # ALLOW: the policy's late slots plus the on-time one; FORBID: one at a time.
    assert counts == {
        ("RUN_ALL", "ALLOW"): 4, ("RUN_ONCE", "ALLOW"): 2, ("SKIP", "ALLOW"): 1,
        ("RUN_ALL", "FORBID"): 1, ("RUN_ONCE", "FORBID"): 1, ("SKIP", "FORBID"): 1,
    }  # fmt: skip


def test_an_instant_once_started_is_finished_by_the_next_passes() -> None:
    clock = FakeClock(MIDNIGHT - timedelta(seconds=200))
    crons = MemCronStore(MemStore(1, clock))
    wave(crons, 3000, MIDNIGHT)
    m = Materializer(crons, clock=clock, initial_rate=30.0)
    assert asyncio.run(m.horizon(0, clock.now())) >= MIDNIGHT  # started early
    # The rate turns out higher than assumed: what is left alone would wait,
    # but a started instant goes on, pass after pass, until it is done.
    m._rate[0] = fresh_rate = 10_000.0
    clock.advance(5)
    assert asyncio.run(m.horizon(0, clock.now())) >= MIDNIGHT
    fresh = Materializer(crons, clock=clock, initial_rate=fresh_rate)
    assert asyncio.run(fresh.horizon(0, clock.now())) < MIDNIGHT
