"""The PostgreSQL store against a real server: claim, fence, retry, reap."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

import shardmap
from cluster.coordination.base import StaticCoordinator
from cluster.errors import Conflict, NotFound
from cluster.leader.loop import LeaderLoop
from cluster.leader.reaper import Reaper
from cluster.model import (
    CancelParams,
    ClaimParams,
    FinishParams,
    GetJobParams,
    HeartbeatParams,
    JobResult,
    JobStatus,
    Outcome,
    RescheduleParams,
)
from cluster.store.postgres import PgStore
from tests.helpers import job_params

pytestmark = pytest.mark.integration
URL = "http://example.test/fire"


def claim(worker: str = "w1", limit: int = 10, lease: float = 30, now: datetime | None = None) -> ClaimParams:
    return ClaimParams(worker_id=worker, limit=limit, lease_seconds=lease, grace_seconds=0, now=now)


def result(job, outcome: Outcome = Outcome.SUCCEEDED, delay: float = 0.0, error: str | None = None) -> JobResult:
    return JobResult(job.lease, outcome, "w1", datetime.now(UTC), 0.01, error, delay)


def shard_of(p) -> int:
    return shardmap.ShardMap(2).shard_of(p.id)


async def test_claim_marks_running_and_bumps_attempt(store: PgStore) -> None:
    p = job_params(URL)
    await store.create_job(shard_of(p), p)
    jobs = await store.claim_jobs(shard_of(p), claim())
    assert [j.id for j in jobs] == [p.id]
    assert jobs[0].attempt == 1
    again = await store.claim_jobs(shard_of(p), claim("w2"))
    assert again == []  # a RUNNING job is not claimed twice
    rec = await store.get_job(shard_of(p), GetJobParams(p.id, "svc"))
    assert rec is not None and rec.status is JobStatus.RUNNING


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_statement_time_and_pool_state_are_exported(store: PgStore) -> None:
    p = job_params(URL)
    shard = str(shard_of(p))
    await store.create_job(shard_of(p), p)
    before = sample("vakit_store_query_seconds_count", shard=shard, query="claim_jobs")
    [job] = await store.claim_jobs(shard_of(p), claim())
    assert sample("vakit_store_query_seconds_count", shard=shard, query="claim_jobs") == before + 1
    await store.finish_jobs(shard_of(p), FinishParams((result(job),)))
    assert sample("vakit_store_query_seconds_count", shard=shard, query="finish_jobs") >= 1
    size = sample("vakit_db_pool_connections", shard=shard, state="size")
    idle = sample("vakit_db_pool_connections", shard=shard, state="idle")
    assert size >= 1 and 0 <= idle <= size
    assert sample("vakit_db_pool_connections", shard=shard, state="waiting") == 0


async def test_out_of_range_shard_is_a_value_error(store: PgStore) -> None:
    with pytest.raises(ValueError, match="out of range"):
        await store.claim_jobs(store.shard_count, claim())


async def test_leader_loop_stamps_its_last_success(store: PgStore) -> None:
    loop = LeaderLoop(Reaper(store), StaticCoordinator("w1", 2), 2, 5.0)
    started = datetime.now(UTC).timestamp()
    await loop.run_once()
    for shard in ("0", "1"):
        stamp = sample("vakit_maintenance_last_success_timestamp_seconds", loop="reaper", shard=shard)
        assert stamp >= started - 1


async def test_future_jobs_are_not_claimed(store: PgStore) -> None:
    p = job_params(URL, run_at=datetime.now(UTC) + timedelta(minutes=5))
    await store.create_job(shard_of(p), p)
    assert await store.claim_jobs(shard_of(p), claim()) == []


async def test_success_moves_to_history_with_attempt_log(store: PgStore) -> None:
    p = job_params(URL)
    shard = shard_of(p)
    await store.create_job(shard, p)
    [job] = await store.claim_jobs(shard, claim())
    written = await store.finish_jobs(shard, FinishParams((result(job),)))
    assert written == {p.id}
    rec = await store.get_job(shard, GetJobParams(p.id, "svc"))
    assert rec is not None and rec.status is JobStatus.SUCCEEDED and rec.finished_at
    assert [(a.attempt, a.outcome, a.worker) for a in rec.attempts] == [(1, "SUCCEEDED", "w1")]


async def test_stale_completion_is_fenced(store: PgStore) -> None:
    p = job_params(URL, max_attempts=3)
    shard = shard_of(p)
    await store.create_job(shard, p)
    past = datetime.now(UTC) + timedelta(seconds=1)
    [stale] = await store.claim_jobs(shard, claim("old", lease=0.001))
    reaped = await store.reap_expired(shard, now=past + timedelta(seconds=5))
    assert reaped.rescheduled == 1
    [fresh] = await store.claim_jobs(shard, claim("new"))
    assert fresh.attempt == stale.attempt + 1
    # The stale worker wakes up: heartbeat and completion write nothing.
    hb = HeartbeatParams((stale.lease,), lease_seconds=30, grace_seconds=0)
    assert await store.heartbeat(shard, hb) == set()
    assert await store.finish_jobs(shard, FinishParams((result(stale),))) == set()
    assert await store.finish_jobs(shard, FinishParams((result(fresh),))) == {p.id}
    rec = await store.get_job(shard, GetJobParams(p.id, "svc"))
    assert rec is not None and rec.status is JobStatus.SUCCEEDED and rec.attempt == 2
    assert [a.outcome for a in rec.attempts] == ["LEASE_EXPIRED", "SUCCEEDED"]


async def test_retry_then_fail_after_max_attempts(store: PgStore) -> None:
    p = job_params(URL, max_attempts=2)
    shard = shard_of(p)
    await store.create_job(shard, p)
    [job] = await store.claim_jobs(shard, claim())
    await store.finish_jobs(shard, FinishParams((result(job, Outcome.RETRY, 60, "HTTP 503"),)))
    rec = await store.get_job(shard, GetJobParams(p.id, "svc"))
    assert rec is not None and rec.status is JobStatus.SCHEDULED and rec.last_error == "HTTP 503"
    assert rec.run_at > datetime.now(UTC) + timedelta(seconds=50)
    later = datetime.now(UTC) + timedelta(seconds=61)
    [job2] = await store.claim_jobs(shard, claim(now=later))
    assert job2.attempt == 2
    await store.finish_jobs(shard, FinishParams((result(job2, Outcome.FAILED, error="HTTP 503"),)))
    rec = await store.get_job(shard, GetJobParams(p.id, "svc"))
    assert rec is not None and rec.status is JobStatus.FAILED and rec.last_error == "HTTP 503"
    assert len(rec.attempts) == 2


async def test_reaper_fails_job_without_attempts_left(store: PgStore) -> None:
    p = job_params(URL, max_attempts=1)
    shard = shard_of(p)
    await store.create_job(shard, p)
    await store.claim_jobs(shard, claim(lease=0.001))
    out = await store.reap_expired(shard, now=datetime.now(UTC) + timedelta(seconds=5))
    assert (out.rescheduled, out.failed) == (0, 1)
    rec = await store.get_job(shard, GetJobParams(p.id, "svc"))
    assert rec is not None and rec.status is JobStatus.FAILED and "lease expired" in (rec.last_error or "")


async def test_heartbeat_extends_lease(store: PgStore) -> None:
    p = job_params(URL)
    shard = shard_of(p)
    await store.create_job(shard, p)
    [job] = await store.claim_jobs(shard, claim(lease=1))
    kept = await store.heartbeat(shard, HeartbeatParams((job.lease,), lease_seconds=600, grace_seconds=0))
    assert kept == {p.id}
    out = await store.reap_expired(shard, now=datetime.now(UTC) + timedelta(seconds=60))
    assert out.rescheduled == 0


async def test_idempotent_create_returns_first_job(store: PgStore) -> None:
    p1 = job_params(URL, key="order-1")
    p2 = job_params(URL, key="order-1")  # same key, a new id (same slot)
    shard = shard_of(p1)
    assert shard == shard_of(p2)
    first = await store.create_job(shard, p1)
    second = await store.create_job(shard, p2)
    assert first.created and not second.created
    assert second.job.id == p1.id


async def test_key_reuse_with_other_body_conflicts(store: PgStore) -> None:
    p1 = job_params(URL, key="k")
    await store.create_job(shard_of(p1), p1)
    other = job_params(URL, key="k")
    other = type(other)(**{**other.__dict__, "fingerprint": "different"})
    with pytest.raises(Conflict):
        await store.create_job(shard_of(other), other)


async def test_concurrent_idempotent_creates_make_one_job(store: PgStore) -> None:
    params = [job_params(URL, key="same-key") for _ in range(20)]
    shard = shard_of(params[0])
    results = await asyncio.gather(*(store.create_job(shard, p) for p in params))
    assert sum(r.created for r in results) == 1
    assert len({r.job.id for r in results}) == 1


async def test_patch_and_cancel_only_while_scheduled(store: PgStore) -> None:
    p = job_params(URL, run_at=datetime.now(UTC) + timedelta(minutes=10))
    shard = shard_of(p)
    await store.create_job(shard, p)
    new_time = datetime.now(UTC) - timedelta(seconds=1)
    rec = await store.reschedule_job(shard, RescheduleParams(p.id, "svc", new_time))
    assert rec.run_at == new_time
    await store.claim_jobs(shard, claim())
    with pytest.raises(Conflict):
        await store.reschedule_job(shard, RescheduleParams(p.id, "svc", new_time))
    with pytest.raises(Conflict):
        await store.cancel_job(shard, CancelParams(p.id, "svc"))
    with pytest.raises(NotFound):
        await store.cancel_job(shard, CancelParams(p.id, "other-owner"))


async def test_far_jobs_are_visible_and_moved(store: PgStore) -> None:
    run_at = datetime.now(UTC) + timedelta(hours=3)
    p = job_params(URL, run_at=run_at, far=True)
    shard = shard_of(p)
    await store.create_job(shard, p)
    rec = await store.get_job(shard, GetJobParams(p.id, "svc"))
    assert rec is not None and rec.status is JobStatus.SCHEDULED
    assert await store.move_far_jobs(shard, horizon_seconds=3600) == 0
    assert await store.move_far_jobs(shard, horizon_seconds=4 * 3600) == 1
    rec = await store.get_job(shard, GetJobParams(p.id, "svc"))
    assert rec is not None and rec.run_at == run_at
    cancelled = await store.cancel_job(shard, CancelParams(p.id, "svc"))
    assert cancelled.status is JobStatus.CANCELLED


async def test_release_refunds_unfired_attempts(store: PgStore) -> None:
    p = job_params(URL, max_attempts=1)
    shard = shard_of(p)
    await store.create_job(shard, p)
    [job] = await store.claim_jobs(shard, claim())
    assert await store.release_jobs(shard, [job.lease], [True]) == {p.id}
    [again] = await store.claim_jobs(shard, claim())
    assert again.attempt == 2 and again.max_attempts == 2


async def test_janitor_makes_and_drops_day_partitions(store: PgStore) -> None:
    today = datetime.now(UTC).date()
    far_past = today - timedelta(days=40)
    first = await store.maintain_history(0, retention_days=30, today=far_past)
    assert first.made_partitions > 0
    result = await store.maintain_history(0, retention_days=30, today=today)
    assert result.dropped_partitions and all(
        n[-8:] < (today - timedelta(days=30)).strftime("%Y%m%d") for n in result.dropped_partitions
    )


async def test_jobs_are_found_while_the_mover_runs(store: PgStore) -> None:
    """GET, PATCH and DELETE see one job wherever it lives, mid-move too."""
    base = datetime.now(UTC) + timedelta(hours=2)
    params = [job_params(URL, run_at=base + timedelta(seconds=i), far=True) for i in range(600)]
    for p in params:
        await store.create_job(shard_of(p), p)
    stop = asyncio.Event()

    async def mover() -> int:
        moved = 0
        for shard in (0, 1):
            while n := await store.move_far_jobs(shard, horizon_seconds=3 * 3600, limit=20):
                moved += n
                await asyncio.sleep(0)
        stop.set()
        return moved

    async def reader() -> int:
        reads = 0
        while not stop.is_set():
            for p in params[reads % 600 :: 37]:
                rec = await store.get_job(shard_of(p), GetJobParams(p.id, "svc", with_attempts=False))
                assert rec is not None and rec.status is JobStatus.SCHEDULED, p.id
                reads += 1
        return reads

    async def patcher() -> int:
        patched = 0
        while not stop.is_set():
            p = params[patched % 600]
            await store.reschedule_job(shard_of(p), RescheduleParams(p.id, "svc", p.run_at))
            patched += 1
        return patched

    moved, reads, patched = await asyncio.gather(mover(), reader(), patcher())
    assert moved == 600 and reads > 0 and patched > 0
    for p in params[:50]:
        await store.cancel_job(shard_of(p), CancelParams(p.id, "svc"))
