"""The store operations preloading rests on, held to one contract: the wave
forecast (``due_ahead``) and the claim limited to a window of ``run_at``.

Runs on the in-memory store and on real PostgreSQL (``h``, tests/contract/conftest.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from cluster.model import ClaimParams, DueAheadParams, DueSecond
from tests.contract.conftest import Harness
from tests.contract.test_store_contract import SHARD, claim, create


def second(at: datetime) -> datetime:
    return at.replace(microsecond=0)


async def test_due_ahead_counts_scheduled_jobs_per_upcoming_second(h: Harness) -> None:
    now = h.now()
    wave = now + timedelta(seconds=5)
    await create(h, run_at=now - timedelta(seconds=1))  # already due: not ahead
    for _ in range(4):
        await create(h, run_at=wave)
    await create(h, run_at=now + timedelta(seconds=2))
    await create(h, run_at=now + timedelta(seconds=30))  # beyond the horizon
    # One of the wave is claimed: RUNNING, it is not counted any more.
    [c] = await h.store.claim_jobs(
        SHARD, ClaimParams("w", 1, 30, 0, now=now, window=(wave, wave + timedelta(microseconds=1)))
    )
    assert c.run_at == wave
    forecast = await h.store.due_ahead(SHARD, DueAheadParams(10.0, 1000, now=now))
    assert forecast == [
        DueSecond(second(now + timedelta(seconds=2)), 1),
        DueSecond(second(wave), 3),
    ]


async def test_due_ahead_counts_only_the_earliest_up_to_its_limit(h: Harness) -> None:
    now = h.now()
    for s in (1, 1, 2, 3, 3, 3):
        await create(h, run_at=now + timedelta(seconds=s))
    forecast = await h.store.due_ahead(SHARD, DueAheadParams(10.0, 4, now=now))
    assert sum(d.jobs for d in forecast) == 4
    assert forecast[0] == DueSecond(second(now + timedelta(seconds=1)), 2)


async def test_a_window_claim_takes_only_the_wave_and_leases_from_its_run_at(h: Harness) -> None:
    now = h.now()
    before = await create(h, run_at=now + timedelta(seconds=1))
    wave = [await create(h, run_at=now + timedelta(seconds=5), timeout=60) for _ in range(3)]
    after = await create(h, run_at=now + timedelta(seconds=7))
    start, end = now + timedelta(seconds=4), now + timedelta(seconds=6)
    params = ClaimParams("w", 10, 30, 0, now=now, window=(start, end))
    claimed = await h.store.claim_jobs(SHARD, params)
    assert {c.id for c in claimed} == {p.id for p in wave}
    assert all(c.lease_until == c.run_at + timedelta(seconds=30) for c in claimed)
    assert await h.store.claim_jobs(SHARD, params) == []  # never twice
    # The jobs around the wave were left SCHEDULED for the regular claims.
    rest = await h.store.claim_jobs(SHARD, claim(h, limit=10, prefetch=10))
    assert {c.id for c in rest} == {before.id, after.id}
