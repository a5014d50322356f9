"""Limits that hold across the cluster (issue 44): the spelling, each
shard's share, the rate's arithmetic (GCRA) on a hand-moved clock, and the
worker claiming through them on the in-memory store: over-limit jobs are
not claimed, stay SCHEDULED and cancellable, and other keys go by."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from prometheus_client import REGISTRY

import shardmap
from cluster.clock import FakeClock
from cluster.config import Settings
from cluster.coordination.base import StaticCoordinator
from cluster.model import (
    CancelParams,
    ClaimedJob,
    CreateJobParams,
    GetJobParams,
    JobStatus,
    LimitedClaimParams,
    SetLimitParams,
    TargetLimit,
    admit,
    effective_concurrency,
    parse_limit,
    parse_limits,
    shard_share,
)
from cluster.store.memory import MemStore
from cluster.targets import FireResult
from cluster.targets.http import retry_after
from cluster.worker.admission import LimitBook
from cluster.worker.worker import Worker

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NEVER = datetime.min.replace(tzinfo=UTC)


# -- spelling and shares ----------------------------------------------------------


def test_the_spelling_of_today_and_a_burst() -> None:
    limits = parse_limits({"LocalHost": "20/200", "kafka:orders": "/50/5", "h": "3"})
    assert limits["localhost"] == TargetLimit(20, 200.0)
    assert limits["localhost"].burst_or_default == 4.0  # a fiftieth of a second's rate
    assert limits["kafka:orders"] == TargetLimit(None, 50.0, 5.0)
    assert limits["h"] == TargetLimit(3, None)
    assert parse_limit("x", "/50/5").spelled() == "/50/5"
    for bad in ("many", "1/2/3/4", "-1", "1/0", "1/5/0.5"):
        with pytest.raises(ValueError):
            parse_limit("x", bad)


def test_shares_split_the_limit_evenly_between_shards() -> None:
    share = shard_share(TargetLimit(20, 200.0, 10.0), 2)
    assert share.concurrency == 10
    assert share.interval == pytest.approx(0.01)  # 100/s on each shard
    assert share.tolerance == pytest.approx(0.04)  # 5 of the burst of 10, one always allowed
    # A concurrency below the shard count still leaves every shard one
    # firing: the cluster's effective figure says so.
    assert shard_share(TargetLimit(1, None), 2).concurrency == 1
    assert effective_concurrency(TargetLimit(1, None), 2) == 2
    assert effective_concurrency(TargetLimit(21, None), 2) == 20  # rounded down: never over
    assert shard_share(TargetLimit(0, None), 2).concurrency == 0  # 0: a key paused


# -- the rate's arithmetic ------------------------------------------------------------


def test_admit_spreads_starts_and_carries_the_state() -> None:
    share = shard_share(TargetLimit(None, 10.0, 1.0), 1)  # one every 0.1 s, no burst
    first = admit(share, tat=NEVER, now=T0, running=0, horizon=0.5, most=100)
    assert first.count == 6  # at 0, 0.1, ... 0.5
    assert [first.start(i, T0) for i in range(3)] == [
        T0, T0 + timedelta(seconds=0.1), T0 + timedelta(seconds=0.2)
    ]  # fmt: skip
    # Only two were claimed: the next claim goes on from the third place.
    tat = first.tat(2)
    again = admit(share, tat=tat, now=T0, running=0, horizon=0.5, most=100)
    assert again.start(0, T0) == T0 + timedelta(seconds=0.2) and again.count == 4
    # Concurrency: room is the share less the running ones.
    conc = shard_share(TargetLimit(4, None), 2)
    assert admit(conc, tat=NEVER, now=T0, running=1, horizon=0.5, most=100).count == 1
    assert admit(conc, tat=NEVER, now=T0, running=3, horizon=0.5, most=100).count == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_one_second_window_has_more_than_the_rate_and_its_burst(seed: int) -> None:
    # Two shards claiming at irregular times, each with a horizon, each
    # taking what its share admits of an endless backlog (claims of fewer
    # jobs than admitted too): the starts of both, merged, never put more
    # than rate + burst into any one-second window, and keep up the rate.
    rng = random.Random(seed)
    limit = TargetLimit(None, 200.0)
    starts: list[float] = []
    for _shard in range(2):
        share = shard_share(limit, 2)
        tat, now = NEVER, T0
        while now < T0 + timedelta(seconds=10):
            room = admit(share, tat=tat, now=now, running=0, horizon=1.0, most=5000)
            taken = rng.randint(room.count // 2, room.count)
            starts += [(room.start(i, now) - T0).total_seconds() for i in range(taken)]
            tat = room.tat(taken)
            now += timedelta(seconds=rng.uniform(0.05, 0.6))
    starts.sort()
    burst = limit.burst_or_default
    j = 0
    for i, at in enumerate(starts):
        while starts[j] <= at - 1.0:
            j += 1
        assert i - j + 1 <= 200 + burst  # the window (at - 1 s, at]
    steady = [s for s in starts if 2.0 <= s < 8.0]
    assert len(steady) >= 0.95 * 200 * 6  # the rate is kept up, not halved


# -- the worker, on the in-memory store ------------------------------------------------


class Sink:
    """A target that holds each firing until released; counts those at once."""

    kind = "HTTP"
    enforces_timeout = False

    def __init__(self) -> None:
        self.now: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.fired: list[str] = []
        self.gate = asyncio.Event()

    async def fire(self, job: ClaimedJob, job_id: str, timeout: float) -> FireResult:
        host = str(job.target["url"]).split("/")[2]
        self.fired.append(job_id)
        self.now[host] = self.now.get(host, 0) + 1
        self.peak[host] = max(self.peak.get(host, 0), self.now[host])
        await self.gate.wait()
        self.now[host] -= 1
        return FireResult.success()

    async def close(self) -> None:
        return None


def job_on(shard: int, host: str) -> CreateJobParams:
    slot = next(s for s in range(shardmap.SLOTS) if s % 2 == shard)
    return CreateJobParams(
        id=shardmap.new_uuid(slot),
        owner="svc",
        type="T",
        run_at=T0,
        scheduled_for=T0,
        target={"kind": "HTTP", "url": f"http://{host}/hook"},
        payload={},
        max_attempts=3,
        timeout_seconds=60,
    )


def make_worker(store: MemStore, clock: FakeClock, sink: Sink, name: str, **over: object) -> Worker:
    base: dict[str, object] = {
        "shards": ["a", "b"], "lease_seconds": 30, "lease_grace_seconds": 0, "complete_linger": 0
    }
    settings = Settings(**{**base, **over})  # type: ignore[arg-type]
    return Worker(settings, store, StaticCoordinator(name, 2), {"HTTP": sink}, clock=clock, worker_id=name)


async def test_two_workers_hold_the_limit_and_leave_the_rest_free() -> None:
    clock = FakeClock(T0)
    store = MemStore(2, clock)
    limited = [job_on(i % 2, "a.example") for i in range(12)]
    free = [job_on(i % 2, "b.example") for i in range(12)]
    for p in [*limited, *free]:
        await store.create_job(shardmap.ShardMap(2).shard_of(p.id), p)
    sink = Sink()
    workers = [
        make_worker(store, clock, sink, f"w{i}", target_limits={"a.example": "4"}) for i in range(2)
    ]
    # Both workers claim on both shards (as two owners of a shard might):
    # the shares hold whoever claims.
    for w in workers:
        for shard in (0, 1):
            await w.run_once(shard)
    await asyncio.sleep(0.01)
    assert sink.peak.get("a.example") == 4  # 2 per shard, both workers together
    assert sink.now.get("b.example") == 12  # no limit: all of them at once
    # The rest of a.example's jobs are not claimed: SCHEDULED, no lease,
    # cancellable.
    held = []
    for p in limited:
        job = await store.get_job(shardmap.ShardMap(2).shard_of(p.id), GetJobParams(p.id, "svc"))
        assert job is not None
        if job.status is JobStatus.SCHEDULED:
            held.append(p)
    assert len(held) == 8
    victim = held[0]
    shard = shardmap.ShardMap(2).shard_of(victim.id)
    cancelled = await store.cancel_job(shard, CancelParams(victim.id, "svc"))
    assert cancelled.status is JobStatus.CANCELLED
    # Firings end: the room comes back and the rest go, the cancelled one never.
    sink.gate.set()
    for _ in range(10):
        for w in workers:
            for shard in (0, 1):
                await w.flush_once(shard, wait=False)
                await w.run_once(shard)
        await asyncio.sleep(0.01)
    for w in workers:
        for shard in (0, 1):
            await w.flush_once(shard, wait=False)
    victim_id = shardmap.encode_id("job", victim.id)
    assert victim_id not in sink.fired
    assert len(sink.fired) == 23 and sink.peak["a.example"] == 4
    for w in workers:
        await w.stop(grace=0)


async def test_a_dead_holders_permits_come_back_with_its_lease() -> None:
    clock = FakeClock(T0)
    store = MemStore(2, clock)
    jobs = [job_on(0, "a.example") for _ in range(3)]
    for p in jobs:
        await store.create_job(0, p)
    params = LimitedClaimParams("dead", "a.example", TargetLimit(2, None), 2, 10, 30, 0, 1.0)
    assert len(await store.claim_limited(0, params)) == 1  # a share of 1 on each shard
    # The holder dies: nothing comes back before its lease ends...
    clock.advance(timedelta(seconds=30))
    assert await store.claim_limited(0, params) == []
    # ... and the permit does as it ends, before any reaper ran.
    clock.advance(timedelta(seconds=1.5))
    assert len(await store.claim_limited(0, params)) == 1


async def test_run_time_limits_override_the_configured_ones() -> None:
    clock = FakeClock(T0)
    store = MemStore(2, clock)
    sink = Sink()
    worker = make_worker(store, clock, sink, "w1", target_limits={"a.example": "4"})
    for shard in (0, 1):
        await store.set_limit(shard, SetLimitParams("a.example", TargetLimit(None, None)))
        await store.set_limit(shard, SetLimitParams("c.example", TargetLimit(2, 10.0)))
    assert await worker.limits.refresh(0) == {"c.example": TargetLimit(2, 10.0)}
    for shard in (0, 1):
        await store.set_limit(shard, SetLimitParams("a.example", None))  # back to the configuration
    worker.limits._shards[0].read_at = float("-inf")  # the next claim re-reads
    assert set(await worker.limits.refresh(0)) == {"a.example", "c.example"}
    await worker.stop(grace=0)


async def test_the_jobs_held_back_are_counted_per_key() -> None:
    clock = FakeClock(T0)
    store = MemStore(2, clock)
    for i in range(5):
        await store.create_job(i % 2, job_on(i % 2, "a.example"))
    await store.create_job(0, job_on(0, "b.example"))
    book = LimitBook({"a.example": TargetLimit(1, None)}, store)
    for shard in (0, 1):
        await book.refresh(shard)
    assert REGISTRY.get_sample_value("vakit_target_waiting_jobs", {"target": "a.example"}) == 5
    assert REGISTRY.get_sample_value("vakit_limit_in_force", {"target": "a.example", "kind": "concurrency"}) == 2


def test_retry_after_is_read_in_seconds_or_as_a_date() -> None:
    assert retry_after("7") == 7.0
    assert retry_after("999999") == 3600.0  # at most an hour
    later = datetime.now(UTC) + timedelta(seconds=30)
    assert 25 <= (retry_after(format_datetime(later, usegmt=True)) or 0) <= 30
    assert retry_after(None) is None and retry_after("soon") is None


async def test_a_429_with_retry_after_pauses_the_key_on_every_shard() -> None:
    clock = FakeClock(T0)
    store = MemStore(2, clock)

    class Busy(Sink):
        async def fire(self, job: ClaimedJob, job_id: str, timeout: float) -> FireResult:
            self.fired.append(job_id)
            return FireResult(ok=False, retryable=True, error="HTTP 429", retry_after=5.0)

    await store.create_job(0, job_on(0, "a.example"))
    worker = make_worker(store, clock, Busy(), "w1", target_limits={"a.example": "4/100"})
    await worker.run_once(0)
    for _ in range(20):
        await asyncio.sleep(0.01)
    for shard in (0, 1):
        assert store._shard(shard).buckets["a.example"] == T0 + timedelta(seconds=5)
    await worker.stop(grace=0)
