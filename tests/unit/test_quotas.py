"""Per-owner limits: the token bucket and the quota counts, on a hand-moved clock."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.config import Settings
from cluster.errors import Overloaded, ShardUnavailable
from cluster.model import OwnerCountsParams
from cluster.services.quotas import OwnerLimits, TokenBucket
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_bucket_admits_its_burst_then_its_rate() -> None:
    b = TokenBucket(rate=2.0, capacity=3, now=0.0)
    assert [b.take(1, 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take(1, 0.0) == pytest.approx(0.5)  # one token every 0.5 s
    assert b.take(1, 0.25) == pytest.approx(0.25)  # a refusal takes nothing
    assert b.take(1, 0.5) == 0.0
    # Idle time refills up to the capacity, no further.
    assert b.full(100.0)
    assert [b.take(1, 100.0) for _ in range(4)][-1] == pytest.approx(0.5)


def test_bucket_batches_take_their_size_and_one_beyond_the_burst_leaves_a_debt() -> None:
    b = TokenBucket(rate=10.0, capacity=5, now=0.0)
    assert b.take(4, 0.0) == 0.0
    assert b.take(2, 0.0) == pytest.approx(0.1)  # 1 left, 2 needed
    # Larger than the burst: admitted from a full bucket, and paid off later.
    assert b.take(8, 1.0) == 0.0
    assert b.take(1, 1.0) == pytest.approx(0.4)  # -3 now: 4 tokens to a usable one
    assert b.take(1, 1.41) == 0.0
    with pytest.raises(ValueError):
        TokenBucket(rate=0.0, capacity=5, now=0.0)


def limits(clock: Clock, **over: Any) -> OwnerLimits:
    base: dict[str, Any] = {"owner_create_rate": 5, "owner_create_burst": 5}
    return OwnerLimits(Settings(**{**base, **over}), monotonic=clock)


def test_creates_are_limited_per_owner_with_retry_after() -> None:
    clock = Clock()
    lim = limits(clock)
    lim.admit_jobs("a", 3)
    lim.admit_crons("a", 2)  # jobs and crons share the owner's create rate
    with pytest.raises(Overloaded) as refused:
        lim.admit_jobs("a")
    assert refused.value.retry_after == 1 and refused.value.fields["limit"] == "owner_create_rate"
    lim.admit_jobs("b", 5)  # another owner has its own bucket
    clock.now += 0.2
    lim.admit_jobs("a")


def test_triggers_default_to_the_cron_minimum_interval() -> None:
    clock = Clock()
    lim = limits(clock, cron_min_interval_seconds=120)  # at most one slot in 2 minutes
    lim.admit_trigger("cron_1")
    with pytest.raises(Overloaded) as refused:
        lim.admit_trigger("cron_1")
    assert refused.value.retry_after == 120 and refused.value.fields["limit"] == "cron_triggers_per_minute"
    lim.admit_trigger("cron_2")
    clock.now += 120
    lim.admit_trigger("cron_1")
    # Set explicitly: that many a minute, at once.
    lim = limits(clock, cron_triggers_per_minute=3)
    for _ in range(3):
        lim.admit_trigger("cron_1")
    with pytest.raises(Overloaded):
        lim.admit_trigger("cron_1")
    off = limits(clock, cron_triggers_per_minute=0, owner_create_rate=0)
    for _ in range(100):
        off.admit_trigger("cron_1")
        off.admit_jobs("a")


def test_full_buckets_are_dropped_when_there_are_many() -> None:
    clock = Clock()
    lim = limits(clock, cron_triggers_per_minute=60)
    for i in range(10_000):
        lim.admit_trigger(f"cron_{i}")
    assert lim.triggers is not None and len(lim.triggers.buckets) == 10_000
    clock.now += 61  # every bucket refilled: as good as new
    lim.admit_trigger("cron_new")
    assert set(lim.triggers.buckets) == {"cron_new"}


async def test_pending_and_cron_quotas_count_from_the_shards_and_add_local_creates() -> None:
    clock = Clock()
    store = MemStore(2)
    crons = MemCronStore(store)
    lim = limits(clock, owner_create_rate=0, owner_max_pending_jobs=10, owner_max_crons=2)
    lim.admit_jobs("a", 10)  # nothing counted yet
    lim.created_jobs("a", 7)
    with pytest.raises(Overloaded) as refused:
        lim.admit_jobs("a", 4)
    assert refused.value.fields["limit"] == "owner_max_pending_jobs"
    assert refused.value.retry_after == 30  # the next count
    lim.admit_jobs("a", 3)
    lim.admit_jobs("b", 10)
    # A count replaces what this process added: the shards hold nothing of "a".
    await lim.refresh(store, crons)
    lim.admit_jobs("a", 10)
    lim.created_crons("a", 2)
    with pytest.raises(Overloaded) as refused:
        lim.admit_crons("a")
    assert refused.value.fields["limit"] == "owner_max_crons"


async def test_a_failed_count_keeps_the_last_one_and_what_was_added() -> None:
    class Down(MemStore):
        async def pending_by_owner(self, shard: int, params: OwnerCountsParams) -> dict[str, int]:
            raise ShardUnavailable("down", shard=shard)

    clock = Clock()
    store = Down(2)
    lim = limits(clock, owner_create_rate=0, owner_max_pending_jobs=10)
    lim.created_jobs("a", 8)
    await lim.refresh(store, MemCronStore(store))
    with pytest.raises(Overloaded):
        lim.admit_jobs("a", 3)
    lim.admit_jobs("a", 2)
