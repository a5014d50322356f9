"""The limited claim and the run-time limits (issue 44), against the
in-memory store and PostgreSQL alike: one suite, so the fake cannot drift."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cluster.model import (
    ClaimParams,
    CreateJobParams,
    GetJobParams,
    JobStatus,
    LimitedClaimParams,
    LimitSetting,
    SetLimitParams,
    TargetLimit,
)
from tests.contract.conftest import Harness
from tests.contract.test_store_contract import job

SHARD = 0
LIMITED = "http://Limited.Example:8080/fire"
FREE = "http://free.example/fire"


async def made(h: Harness, url: str, n: int) -> list[CreateJobParams]:
    out = []
    for _ in range(n):
        p = job(h)._replace(target={"kind": "HTTP", "url": url})
        await h.store.create_job(SHARD, p)
        out.append(p)
    return out


def limited(h: Harness, limit: TargetLimit, *, most: int = 100, at: float = 0.0) -> LimitedClaimParams:
    return LimitedClaimParams(
        worker_id="w1", key="limited.example", limit=limit, shards=2, most=most,
        lease_seconds=30, grace_seconds=0, horizon_seconds=1.0,
        now=h.now() + timedelta(seconds=at),
    )  # fmt: skip


async def test_the_regular_claim_leaves_the_limited_keys_alone(h: Harness) -> None:
    await made(h, LIMITED, 3)
    free = await made(h, FREE, 2)
    params = ClaimParams("w1", 10, 30, 0, now=h.now(), limited=("limited.example",))
    assert {c.id for c in await h.store.claim_jobs(SHARD, params)} == {p.id for p in free}


async def test_the_concurrency_share_counts_running_rows_until_their_lease_ends(h: Harness) -> None:
    jobs = await made(h, LIMITED, 5)
    share = TargetLimit(4, None)  # 2 on each of 2 shards
    first = await h.store.claim_limited(SHARD, limited(h, share))
    assert len(first) == 2 and all(a.start == h.now() for a in first)
    assert await h.store.claim_limited(SHARD, limited(h, share, at=1)) == []
    # Held back: SCHEDULED, no lease.
    claimed = {a.job.id for a in first}
    for p in jobs:
        record = await h.store.get_job(SHARD, GetJobParams(p.id, "svc"))
        assert record is not None
        assert record.status is (JobStatus.RUNNING if p.id in claimed else JobStatus.SCHEDULED)
    assert await h.store.count_waiting(SHARD, ["limited.example", "free.example"]) == {
        "limited.example": 3
    }
    # Their leases end (horizon 1 s + lease 30 s): the permits come back.
    again = await h.store.claim_limited(SHARD, limited(h, share, at=31.5))
    assert len(again) == 2


async def test_the_rate_share_spreads_starts_and_carries_over(h: Harness) -> None:
    await made(h, LIMITED, 30)
    rate = TargetLimit(None, 10.0, 2.0)  # 5/s per shard: one every 0.2 s, 1 of burst
    first = await h.store.claim_limited(SHARD, limited(h, rate, most=3))
    starts = [(a.start - h.now()).total_seconds() for a in first]
    assert starts == pytest.approx([0.0, 0.2, 0.4])
    # The next claim goes on where the last one stopped, not from now.
    second = await h.store.claim_limited(SHARD, limited(h, rate))
    starts = [(a.start - h.now()).total_seconds() for a in second]
    assert starts == pytest.approx([0.6, 0.8, 1.0])
    assert await h.store.claim_limited(SHARD, limited(h, rate)) == []
    # Back-pressure: nothing before the instant a target asked for.
    await h.store.slow_limit(SHARD, "limited.example", h.now() + timedelta(seconds=10))
    assert await h.store.claim_limited(SHARD, limited(h, rate, at=5)) == []
    assert len(await h.store.claim_limited(SHARD, limited(h, rate, at=10, most=1))) == 1


async def test_run_time_limits_are_set_read_and_dropped(h: Harness) -> None:
    await h.store.set_limit(SHARD, SetLimitParams("a.example", TargetLimit(3, 9.5, 2.0)))
    await h.store.set_limit(SHARD, SetLimitParams("b.example", TargetLimit(None, None)))
    await h.store.set_limit(SHARD, SetLimitParams("a.example", TargetLimit(4, None)))
    read = await h.store.read_limits(SHARD)
    assert [(s.key, s.limit) for s in read] == [
        ("a.example", TargetLimit(4, None)),
        ("b.example", TargetLimit(None, None)),
    ]
    assert all(isinstance(s, LimitSetting) for s in read)
    await h.store.set_limit(SHARD, SetLimitParams("a.example", None))
    assert [s.key for s in await h.store.read_limits(SHARD)] == ["b.example"]
    assert await h.store.read_limits(1) == []
