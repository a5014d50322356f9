"""Misfire, deadline and concurrency rules of the materializer's plan, with a
fake "now": no database, no sleeping."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

import shardmap
from cluster.cron.plan import cron_slot, plan, schedule_of
from cluster.model import CronRecord

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
LOOKAHEAD = timedelta(seconds=60)
THRESHOLD = timedelta(seconds=60)


def cron(schedule: str = "0 * * * *", **over: object) -> CronRecord:
    base = CronRecord(
        id=shardmap.new_uuid(cron_slot("svc", "c")),
        owner="svc",
        name="c",
        schedule=schedule,
        schedule_kind="CRON",
        time_zone="UTC",
        type="c",
        target={"kind": "HTTP", "url": "https://x.example/"},
        payload={},
        misfire_policy="RUN_ALL",
        concurrency="ALLOW",
        jitter_seconds=0,
        max_attempts=3,
        timeout_seconds=60,
        starting_deadline_seconds=None,
        enabled=True,
        anchor=datetime(1970, 1, 1, tzinfo=UTC),
        next_fire_at=T0,
        fingerprint="f",
    )
    return dataclasses.replace(base, **over)  # type: ignore[arg-type]


def run(c: CronRecord, now: datetime, pending: int = 0, cap: int = 100):  # type: ignore[no-untyped-def]
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
