"""The store contract: every rule of the job state machine, run against the
in-memory store and PostgreSQL alike (STYLE.md item 13), so the fake cannot
drift from the real store.

Times are pinned through each params object's ``now`` (the SQL's
``coalesce(%(now)s, now())``), from the harness's clock.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

import shardmap
from cluster.errors import Conflict, NotFound
from cluster.model import (
    BacklogParams,
    CancelParams,
    ClaimedJob,
    ClaimParams,
    CreateJobParams,
    CreateJobsParams,
    CreateResult,
    FinishParams,
    GetJobParams,
    HeartbeatParams,
    JobRecord,
    JobResult,
    JobStatus,
    MaintainHistoryParams,
    MoveFarParams,
    Outcome,
    OwnerCountsParams,
    ReapParams,
    ReleaseParams,
    RescheduleParams,
    WorkerBeatParams,
    WorkersSeenParams,
)
from tests.contract.conftest import Harness

SHARD = 0
URL = "http://example.test/fire"


def job(
    h: Harness,
    *,
    run_at: datetime | None = None,
    key: str | None = None,
    fingerprint: str = "fp",
    owner: str = "svc",
    max_attempts: int = 3,
    timeout: int = 30,
    far: bool = False,
    cron_id: uuid.UUID | None = None,
    payload: Any = None,
) -> CreateJobParams:
    when = run_at or h.now() - timedelta(seconds=1)
    return CreateJobParams(
        id=shardmap.new_uuid(shardmap.key_slot(owner, key) if key else None),
        owner=owner,
        type="TEST",
        run_at=when,
        scheduled_for=when,
        target={"kind": "HTTP", "url": URL},
        payload=payload if payload is not None else {"n": 1},
        max_attempts=max_attempts,
        timeout_seconds=timeout,
        idempotency_key=key,
        fingerprint=fingerprint if key else None,
        cron_id=cron_id,
        far=far,
    )


async def create(h: Harness, **kwargs: Any) -> CreateJobParams:
    p = job(h, **kwargs)
    result = await h.store.create_job(SHARD, p)
    assert result.created
    return p


def claim(
    h: Harness,
    worker: str = "w1",
    *,
    limit: int = 10,
    lease: float = 30,
    prefetch: float = 0.0,
    at: float = 0.0,
) -> ClaimParams:
    return ClaimParams(
        worker_id=worker,
        limit=limit,
        lease_seconds=lease,
        grace_seconds=0,
        prefetch_seconds=prefetch,
        now=h.now() + timedelta(seconds=at),
    )


def result(
    h: Harness,
    claimed: ClaimedJob,
    outcome: Outcome = Outcome.SUCCEEDED,
    *,
    delay: float = 0.0,
    error: str | None = None,
    worker: str = "w1",
) -> JobResult:
    return JobResult(claimed.lease, outcome, worker, h.now(), 0.25, error, delay)


async def finish(h: Harness, *results: JobResult, at: float = 0.0) -> set[uuid.UUID]:
    return await h.store.finish_jobs(SHARD, FinishParams(results, now=h.now() + timedelta(seconds=at)))


async def reap(h: Harness, at: float, limit: int = 1000) -> tuple[int, int]:
    out = await h.store.reap_expired(SHARD, ReapParams(limit, now=h.now() + timedelta(seconds=at)))
    return out.rescheduled, out.failed


async def get(h: Harness, p: CreateJobParams, owner: str = "svc") -> JobRecord:
    rec = await h.store.get_job(SHARD, GetJobParams(p.id, owner))
    assert rec is not None
    return rec


# -- create, idempotency, conflict --------------------------------------------


async def test_create_then_get(h: Harness) -> None:
    p = job(h, payload={"order": 98213, "big": 12345678901234567890})
    created = await h.store.create_job(SHARD, p)
    assert created.created and created.job.id == p.id
    assert created.job.status is JobStatus.SCHEDULED and created.job.attempt == 0
    rec = await get(h, p)
    assert (rec.owner, rec.type, rec.status, rec.attempt) == ("svc", "TEST", JobStatus.SCHEDULED, 0)
    assert (rec.run_at, rec.scheduled_for) == (p.run_at, p.scheduled_for)
    assert (rec.max_attempts, rec.timeout_seconds) == (3, 30)
    assert rec.target == p.target and rec.payload == p.payload
    assert rec.attempts == () and rec.finished_at is None
    # Other owners' jobs do not exist for them.
    assert await h.store.get_job(SHARD, GetJobParams(p.id, "other")) is None
    assert await h.store.get_job(SHARD, GetJobParams(shardmap.new_uuid(), "svc")) is None


async def test_idempotent_create_returns_first_job(h: Harness) -> None:
    p1 = job(h, key="order-1")
    p2 = job(h, key="order-1")  # same key, a new id (same slot)
    first = await h.store.create_job(SHARD, p1)
    second = await h.store.create_job(SHARD, p2)
    assert first.created and not second.created
    assert second.job.id == p1.id
    assert second.job.status is JobStatus.SCHEDULED
    assert await h.store.get_job(SHARD, GetJobParams(p2.id, "svc")) is None  # nothing new written


async def test_key_reuse_with_other_body_conflicts(h: Harness) -> None:
    await create(h, key="k")
    with pytest.raises(Conflict) as caught:
        await h.store.create_job(SHARD, job(h, key="k", fingerprint="different"))
    assert caught.value.fields["idempotency_key"] == "k"


async def test_keys_are_per_owner(h: Harness) -> None:
    await create(h, key="k", owner="a")
    other = await h.store.create_job(SHARD, job(h, key="k", owner="b"))
    assert other.created


async def test_a_key_covers_far_jobs_too(h: Harness) -> None:
    far = await create(h, key="later", far=True, run_at=h.now() + timedelta(days=30))
    again = await h.store.create_job(SHARD, job(h, key="later"))
    assert not again.created and again.job.id == far.id


async def test_concurrent_idempotent_creates_make_one_job(h: Harness) -> None:
    params = [job(h, key="same-key") for _ in range(20)]
    results = await asyncio.gather(*(h.store.create_job(SHARD, p) for p in params))
    assert sum(r.created for r in results) == 1
    assert len({r.job.id for r in results}) == 1


# -- batch create ---------------------------------------------------------------


async def test_batch_create_gives_each_job_its_own_result_in_order(h: Harness) -> None:
    existing = await create(h, key="existing")
    batch = (
        job(h),  # 0 new, no key
        job(h, key="new-1"),  # 1 new, keyed
        job(h, key="existing"),  # 2 repeat of a job made before
        job(h, key="existing", fingerprint="other"),  # 3 conflict with it
        job(h, key="new-1"),  # 4 repeat of item 1, in the same batch
        job(h, key="new-1", fingerprint="other"),  # 5 conflict with item 1
        job(h, far=True, run_at=h.now() + timedelta(days=2)),  # 6 new, far
        job(h, key="new-2", far=True, run_at=h.now() + timedelta(days=2)),  # 7 new, far, keyed
    )
    out = await h.store.create_jobs(SHARD, CreateJobsParams(batch))
    assert len(out) == len(batch)
    kinds = [
        "conflict" if isinstance(r, Conflict) else ("new" if r.created else "repeat") for r in out
    ]
    assert kinds == ["new", "new", "repeat", "conflict", "repeat", "conflict", "new", "new"]
    made = [r for r in out if isinstance(r, CreateResult)]
    assert [r.job.id for r in made] == [
        batch[0].id, batch[1].id, existing.id, batch[1].id, batch[6].id, batch[7].id
    ]
    assert all(r.job.status is JobStatus.SCHEDULED for r in made)
    conflict = out[3]
    assert isinstance(conflict, Conflict) and conflict.fields["idempotency_key"] == "existing"
    # What was created is there; repeats and conflicts wrote nothing.
    for i in (0, 1, 6, 7):
        assert (await get(h, batch[i])).status is JobStatus.SCHEDULED
    for i in (2, 3, 4, 5):
        assert await h.store.get_job(SHARD, GetJobParams(batch[i].id, "svc")) is None
    # Near jobs are claimable; far ones wait for the mover.
    claimed = await h.store.claim_jobs(SHARD, claim(h, limit=100))
    assert {c.id for c in claimed} == {existing.id, batch[0].id, batch[1].id}
    moved = await h.store.move_far_jobs(
        SHARD, MoveFarParams(horizon_seconds=3 * 86400, now=h.now())
    )
    assert moved == 2
    # A later single create sees the batch's keys.
    again = await h.store.create_job(SHARD, job(h, key="new-2"))
    assert not again.created and again.job.id == batch[7].id


async def test_batch_create_of_a_thousand(h: Harness) -> None:
    batch = tuple(job(h, key=f"k{i}" if i % 2 else None) for i in range(1000))
    out = await h.store.create_jobs(SHARD, CreateJobsParams(batch))
    assert all(isinstance(r, CreateResult) and r.created for r in out)
    assert [r.job.id for r in out if isinstance(r, CreateResult)] == [p.id for p in batch]
    claimed = await h.store.claim_jobs(SHARD, claim(h, limit=2000))
    assert len(claimed) == 1000
    # The same batch again (new ids, as the API makes them): every keyed job
    # is a repeat of the first, every other one new.
    second = tuple(p._replace(id=shardmap.new_uuid()) for p in batch)
    again = await h.store.create_jobs(SHARD, CreateJobsParams(second))
    assert [isinstance(r, CreateResult) and r.created for r in again] == [
        p.idempotency_key is None for p in batch
    ]
    assert [r.job.id for r in again if isinstance(r, CreateResult)] == [
        first.id if first.idempotency_key else repeat.id for first, repeat in zip(batch, second, strict=True)
    ]


async def test_pending_by_owner_counts_unfinished_jobs_near_and_far(h: Harness) -> None:
    for _ in range(3):
        await create(h, owner="big")
    await create(h, owner="big", far=True, run_at=h.now() + timedelta(days=2))
    running = await create(h, owner="small")
    done = await create(h, owner="small", run_at=h.now() - timedelta(seconds=5))
    claimed = await h.store.claim_jobs(SHARD, claim(h, limit=10))
    assert {c.id for c in claimed} >= {running.id, done.id}
    await finish(h, *(result(h, c) for c in claimed if c.id == done.id))
    # Running ones count, finished ones do not; the most loaded owners first.
    assert await h.store.pending_by_owner(SHARD, OwnerCountsParams()) == {"big": 4, "small": 1}
    assert await h.store.pending_by_owner(SHARD, OwnerCountsParams(limit=1)) == {"big": 4}
    assert await h.store.pending_by_owner(1, OwnerCountsParams()) == {}


async def test_a_job_id_is_never_written_twice(h: Harness) -> None:
    p = await create(h)
    with pytest.raises(Conflict) as caught:
        await h.store.create_job(SHARD, p)
    assert caught.value.fields["constraint"] == "jobs_pkey"
    # In a batch, the statement is refused whole: nothing of it is written.
    other = job(h)
    with pytest.raises(Conflict) as caught:
        await h.store.create_jobs(SHARD, CreateJobsParams((other, p)))
    assert caught.value.fields["constraint"] == "jobs_pkey"
    assert await h.store.get_job(SHARD, GetJobParams(other.id, "svc")) is None


async def test_concurrent_batches_with_the_same_keys_make_each_job_once(h: Harness) -> None:
    # Half of the batches list the keys backwards: two batches that meet on
    # keys must not lock them in opposite orders (a deadlock, one batch lost).
    keys = [f"shared-{i}" for i in range(200)]
    orders = [keys, keys[::-1], keys, keys[::-1]]
    batches = [CreateJobsParams(tuple(job(h, key=k) for k in order)) for order in orders]
    outs = await asyncio.gather(*(h.store.create_jobs(SHARD, b) for b in batches))
    by_key = [dict(zip(order, out, strict=True)) for order, out in zip(orders, outs, strict=True)]
    for key in keys:
        results = [found[key] for found in by_key]
        assert all(isinstance(r, CreateResult) for r in results)
        made = [r for r in results if isinstance(r, CreateResult)]
        assert sum(r.created for r in made) == 1
        assert len({r.job.id for r in made}) == 1


async def test_an_empty_batch_creates_nothing(h: Harness) -> None:
    assert await h.store.create_jobs(SHARD, CreateJobsParams(())) == []


# -- claim ---------------------------------------------------------------------------


async def test_claim_marks_running_and_bumps_attempt(h: Harness) -> None:
    p = await create(h, timeout=20)
    jobs = await h.store.claim_jobs(SHARD, claim(h, lease=30))
    assert [j.id for j in jobs] == [p.id]
    [c] = jobs
    assert (c.attempt, c.max_attempts, c.type, c.run_at) == (1, 3, "TEST", p.run_at)
    assert c.target == p.target and c.payload_json.replace(" ", "") == '{"n":1}'
    assert c.owner == p.owner  # whose grants apply and whose secret signs the firing
    # The lease covers the job's timeout (capped by the configured lease).
    assert c.lease_until == h.now() + timedelta(seconds=20)
    assert await h.store.claim_jobs(SHARD, claim(h, "w2")) == []  # never claimed twice
    rec = await get(h, p)
    assert rec.status is JobStatus.RUNNING and rec.attempt == 1


async def test_future_jobs_are_claimed_only_once_due(h: Harness) -> None:
    p = await create(h, run_at=h.now() + timedelta(seconds=5))
    assert await h.store.claim_jobs(SHARD, claim(h)) == []
    assert await h.store.claim_jobs(SHARD, claim(h, at=4.9)) == []
    assert [j.id for j in await h.store.claim_jobs(SHARD, claim(h, at=5))] == [p.id]


async def test_prefetch_claims_ahead_and_the_lease_runs_from_run_at(h: Harness) -> None:
    p = await create(h, run_at=h.now() + timedelta(seconds=10), timeout=60)
    assert await h.store.claim_jobs(SHARD, claim(h, prefetch=5)) == []
    [c] = await h.store.claim_jobs(SHARD, claim(h, prefetch=15, lease=30))
    assert c.id == p.id and c.run_at == p.run_at
    assert c.lease_until == p.run_at + timedelta(seconds=30)  # not from now


async def test_claim_takes_the_earliest_first_up_to_its_limit(h: Harness) -> None:
    ps = [await create(h, run_at=h.now() - timedelta(seconds=s)) for s in (1, 5, 3, 4, 2)]
    first = await h.store.claim_jobs(SHARD, claim(h, limit=2))
    assert [c.id for c in first] == [ps[1].id, ps[3].id]
    rest = await h.store.claim_jobs(SHARD, claim(h, limit=10))
    assert [c.id for c in rest] == [ps[2].id, ps[4].id, ps[0].id]


async def test_concurrent_claims_never_share_a_job(h: Harness) -> None:
    ids = {(await create(h)).id for _ in range(40)}
    batches = await asyncio.gather(
        *(h.store.claim_jobs(SHARD, claim(h, f"w{i}", limit=15)) for i in range(4))
    )
    claimed = [c.id for batch in batches for c in batch]
    assert len(claimed) == len(set(claimed)) == 40
    assert set(claimed) == ids


async def test_far_jobs_are_not_claimed_until_moved(h: Harness) -> None:
    p = await create(h, far=True)  # due, but in the far table
    assert await h.store.claim_jobs(SHARD, claim(h)) == []
    moved = await h.store.move_far_jobs(SHARD, MoveFarParams(horizon_seconds=60, now=h.now()))
    assert moved == 1
    assert [c.id for c in await h.store.claim_jobs(SHARD, claim(h))] == [p.id]


# -- fencing by attempt -----------------------------------------------------------


async def test_stale_worker_is_fenced(h: Harness) -> None:
    p = await create(h, max_attempts=3)
    [stale] = await h.store.claim_jobs(SHARD, claim(h, "old", lease=1))
    assert await reap(h, at=5) == (1, 0)
    [fresh] = await h.store.claim_jobs(SHARD, claim(h, "new", at=5))
    assert fresh.attempt == stale.attempt + 1 == 2
    # The stale worker wakes up: heartbeat, completion and release write nothing.
    hb = HeartbeatParams((stale.lease,), lease_seconds=30, grace_seconds=0, now=h.now())
    assert await h.store.heartbeat(SHARD, hb) == set()
    assert await finish(h, result(h, stale, worker="old"), at=6) == set()
    assert await h.store.release_jobs(SHARD, ReleaseParams((stale.lease,), (True,), "old")) == set()
    assert (await get(h, p)).status is JobStatus.RUNNING
    assert await finish(h, result(h, fresh, worker="new"), at=6) == {p.id}
    rec = await get(h, p)
    assert rec.status is JobStatus.SUCCEEDED and rec.attempt == 2 and rec.max_attempts == 3
    assert [(a.attempt, a.outcome, a.worker) for a in rec.attempts] == [
        (1, "LEASE_EXPIRED", "old"),
        (2, "SUCCEEDED", "new"),
    ]
    # A finished job is fenced too: a second completion writes nothing.
    assert await finish(h, result(h, fresh, worker="new"), at=7) == set()


async def test_heartbeat_extends_the_lease_and_never_shortens_it(h: Harness) -> None:
    p = await create(h, timeout=3600)
    [c] = await h.store.claim_jobs(SHARD, claim(h, lease=1))
    hb = HeartbeatParams((c.lease,), lease_seconds=600, grace_seconds=0, now=h.now())
    assert await h.store.heartbeat(SHARD, hb) == {p.id}
    assert await reap(h, at=60) == (0, 0)
    short = HeartbeatParams((c.lease,), lease_seconds=1, grace_seconds=0, now=h.now())
    assert await h.store.heartbeat(SHARD, short) == {p.id}
    assert await reap(h, at=60) == (0, 0)  # still the 600 s lease
    assert await reap(h, at=601) == (1, 0)


async def test_finish_writes_each_outcome_of_a_batch_fenced_on_its_own(h: Harness) -> None:
    a, b = await create(h), await create(h)
    claimed = {c.id: c for c in await h.store.claim_jobs(SHARD, claim(h))}
    stale = claimed[b.id]._replace(attempt=7)  # an attempt this job never had
    written = await finish(h, result(h, claimed[a.id]), result(h, stale))
    assert written == {a.id}
    assert (await get(h, a)).status is JobStatus.SUCCEEDED
    assert (await get(h, b)).status is JobStatus.RUNNING


# -- outcomes, retries and backoff, max attempts ---------------------------------


async def test_success_moves_to_history_with_attempt_log(h: Harness) -> None:
    p = await create(h)
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    assert await finish(h, result(h, c), at=1) == {p.id}
    rec = await get(h, p)
    assert rec.status is JobStatus.SUCCEEDED and rec.finished_at == h.now() + timedelta(seconds=1)
    assert [(a.attempt, a.outcome, a.worker, a.error) for a in rec.attempts] == [
        (1, "SUCCEEDED", "w1", None)
    ]
    [logged] = rec.attempts
    assert logged.started_at == h.now() and logged.lateness_seconds == 0.25
    assert logged.finished_at == h.now() + timedelta(seconds=1)
    # Attempts are left out when not asked for.
    bare = await h.store.get_job(SHARD, GetJobParams(p.id, "svc", with_attempts=False))
    assert bare is not None and bare.attempts == ()


async def test_retry_with_backoff_then_success(h: Harness) -> None:
    p = await create(h)
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    await finish(h, result(h, c, Outcome.RETRY, delay=10, error="HTTP 503"))
    rec = await get(h, p)
    assert rec.status is JobStatus.SCHEDULED and rec.last_error == "HTTP 503"
    assert rec.run_at == h.now() + timedelta(seconds=10)  # now + the worker's backoff
    assert rec.scheduled_for == p.scheduled_for  # the logical time stays
    assert await h.store.claim_jobs(SHARD, claim(h, at=9.9)) == []  # not before the backoff
    [c2] = await h.store.claim_jobs(SHARD, claim(h, at=10))
    assert c2.attempt == 2
    await finish(h, result(h, c2), at=10)
    rec = await get(h, p)
    assert rec.status is JobStatus.SUCCEEDED and rec.attempt == 2
    assert [(a.attempt, a.outcome, a.error) for a in rec.attempts] == [
        (1, "ERROR", "HTTP 503"),
        (2, "SUCCEEDED", None),
    ]


async def test_retry_then_fail_after_max_attempts(h: Harness) -> None:
    p = await create(h, max_attempts=2)
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    await finish(h, result(h, c, Outcome.RETRY, delay=60, error="HTTP 503"))
    rec = await get(h, p)
    assert rec.status is JobStatus.SCHEDULED and rec.last_error == "HTTP 503"
    assert rec.run_at == h.now() + timedelta(seconds=60)
    [c2] = await h.store.claim_jobs(SHARD, claim(h, at=61))
    assert c2.attempt == 2 == c2.max_attempts
    # The last attempt failed: the worker reports FAILED (no attempts left).
    await finish(h, result(h, c2, Outcome.FAILED, error="HTTP 500"), at=62)
    rec = await get(h, p)
    assert rec.status is JobStatus.FAILED and rec.last_error == "HTTP 500" and rec.attempt == 2
    assert [a.outcome for a in rec.attempts] == ["ERROR", "ERROR"]
    assert await h.store.claim_jobs(SHARD, claim(h, at=3600)) == []


async def test_permanent_failure_ends_the_job_at_once(h: Harness) -> None:
    p = await create(h, max_attempts=5)
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    await finish(h, result(h, c, Outcome.FAILED, error="HTTP 404"))
    rec = await get(h, p)
    assert rec.status is JobStatus.FAILED and rec.attempt == 1 and rec.last_error == "HTTP 404"


async def test_skipped_occurrence_ends_skipped(h: Harness) -> None:
    p = await create(h)
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    await finish(h, result(h, c, Outcome.SKIPPED, error="starting deadline passed"))
    rec = await get(h, p)
    assert rec.status is JobStatus.SKIPPED
    assert [a.outcome for a in rec.attempts] == ["SKIPPED"]


# -- the reaper ---------------------------------------------------------------------


async def test_reaper_reschedules_expired_leases_with_attempts_left(h: Harness) -> None:
    p = await create(h, timeout=10)
    [c] = await h.store.claim_jobs(SHARD, claim(h, "w9", lease=30))
    assert await reap(h, at=10) == (0, 0)  # lease_until is not yet past
    assert await reap(h, at=11) == (1, 0)
    rec = await get(h, p)
    assert rec.status is JobStatus.SCHEDULED and rec.attempt == 1
    assert rec.last_error == "lease expired (worker w9)"
    assert [(a.attempt, a.outcome, a.worker, a.started_at) for a in rec.attempts] == [
        (1, "LEASE_EXPIRED", "w9", h.now())
    ]
    [again] = await h.store.claim_jobs(SHARD, claim(h, at=11))
    assert again.id == c.id and again.attempt == 2


async def test_reaper_fails_job_without_attempts_left(h: Harness) -> None:
    p = await create(h, max_attempts=1)
    await h.store.claim_jobs(SHARD, claim(h, lease=1))
    assert await reap(h, at=5) == (0, 1)
    rec = await get(h, p)
    assert rec.status is JobStatus.FAILED and rec.finished_at is not None
    assert rec.last_error == "lease expired (worker w1), no attempts left"
    assert [a.outcome for a in rec.attempts] == ["LEASE_EXPIRED"]


async def test_reaper_takes_a_batch_at_a_time(h: Harness) -> None:
    for _ in range(5):
        await create(h)
    await h.store.claim_jobs(SHARD, claim(h, lease=1))
    assert await reap(h, at=5, limit=3) == (3, 0)
    assert await reap(h, at=5, limit=3) == (2, 0)
    assert await reap(h, at=5, limit=3) == (0, 0)


# -- release ---------------------------------------------------------------------------


async def test_release_refunds_unfired_attempts(h: Harness) -> None:
    p = await create(h, max_attempts=1)
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    assert await h.store.release_jobs(SHARD, ReleaseParams((c.lease,), (True,), "w1")) == {p.id}
    rec = await get(h, p)
    assert rec.status is JobStatus.SCHEDULED and rec.attempts == ()  # nothing to log
    [again] = await h.store.claim_jobs(SHARD, claim(h))
    assert again.attempt == 2 and again.max_attempts == 2  # the token never goes back


async def test_release_of_a_fired_attempt_is_logged_and_counts(h: Harness) -> None:
    p = await create(h, max_attempts=3)
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    released = await h.store.release_jobs(
        SHARD, ReleaseParams((c.lease,), (False,), "w1", now=h.now())
    )
    assert released == {p.id}
    rec = await get(h, p)
    assert rec.status is JobStatus.SCHEDULED and rec.max_attempts == 3
    assert [(a.attempt, a.outcome, a.worker) for a in rec.attempts] == [(1, "RELEASED", "w1")]
    # No refunds given: none counted.
    [c2] = await h.store.claim_jobs(SHARD, claim(h))
    assert await h.store.release_jobs(SHARD, ReleaseParams((c2.lease,))) == {p.id}
    assert (await get(h, p)).max_attempts == 3


# -- reschedule and cancel only while SCHEDULED -----------------------------------


async def test_patch_and_cancel_only_while_scheduled(h: Harness) -> None:
    p = await create(h, run_at=h.now() + timedelta(minutes=10))
    moved = await h.store.reschedule_job(SHARD, RescheduleParams(p.id, "svc", h.now()))
    assert moved.run_at == h.now() and moved.status is JobStatus.SCHEDULED
    assert (await get(h, p)).run_at == h.now()
    # Other owners see no such job.
    with pytest.raises(NotFound):
        await h.store.cancel_job(SHARD, CancelParams(p.id, "other-owner"))
    with pytest.raises(NotFound):
        await h.store.reschedule_job(SHARD, RescheduleParams(p.id, "other-owner", h.now()))
    with pytest.raises(NotFound):
        await h.store.cancel_job(SHARD, CancelParams(shardmap.new_uuid(), "svc"))
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    with pytest.raises(Conflict) as caught:
        await h.store.reschedule_job(SHARD, RescheduleParams(p.id, "svc", h.now()))
    assert caught.value.fields["job_status"] == "RUNNING"
    with pytest.raises(Conflict):
        await h.store.cancel_job(SHARD, CancelParams(p.id, "svc"))
    await h.store.release_jobs(SHARD, ReleaseParams((c.lease,), (True,)))
    cancelled = await h.store.cancel_job(SHARD, CancelParams(p.id, "svc", now=h.now()))
    assert cancelled.status is JobStatus.CANCELLED
    rec = await get(h, p)
    assert rec.status is JobStatus.CANCELLED and rec.finished_at == h.now()
    with pytest.raises(Conflict) as caught:
        await h.store.cancel_job(SHARD, CancelParams(p.id, "svc"))
    assert caught.value.fields["job_status"] == "CANCELLED"
    with pytest.raises(Conflict):
        await h.store.reschedule_job(SHARD, RescheduleParams(p.id, "svc", h.now()))
    assert await h.store.claim_jobs(SHARD, claim(h, at=3600)) == []


async def test_a_finished_job_cannot_be_cancelled(h: Harness) -> None:
    p = await create(h)
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    await finish(h, result(h, c))
    with pytest.raises(Conflict) as caught:
        await h.store.cancel_job(SHARD, CancelParams(p.id, "svc"))
    assert caught.value.fields["job_status"] == "SUCCEEDED"


# -- far and near -----------------------------------------------------------------------


async def test_far_jobs_are_visible_and_moved(h: Harness) -> None:
    run_at = h.now() + timedelta(hours=3)
    p = await create(h, run_at=run_at, far=True)
    rec = await get(h, p)
    assert rec.status is JobStatus.SCHEDULED and rec.run_at == run_at
    mover = MoveFarParams(horizon_seconds=3600, now=h.now())
    assert await h.store.move_far_jobs(SHARD, mover) == 0
    later = MoveFarParams(horizon_seconds=4 * 3600, now=h.now())
    assert await h.store.move_far_jobs(SHARD, later) == 1
    assert await h.store.move_far_jobs(SHARD, later) == 0  # moved once
    rec = await get(h, p)
    assert rec.status is JobStatus.SCHEDULED and rec.run_at == run_at
    cancelled = await h.store.cancel_job(SHARD, CancelParams(p.id, "svc"))
    assert cancelled.status is JobStatus.CANCELLED


async def test_far_jobs_can_be_rescheduled_and_cancelled_where_they_are(h: Harness) -> None:
    p = await create(h, run_at=h.now() + timedelta(days=3), far=True)
    new_time = h.now() + timedelta(days=4)
    rec = await h.store.reschedule_job(SHARD, RescheduleParams(p.id, "svc", new_time))
    assert rec.run_at == new_time
    cancelled = await h.store.cancel_job(SHARD, CancelParams(p.id, "svc"))
    assert cancelled.status is JobStatus.CANCELLED
    assert await h.store.move_far_jobs(SHARD, MoveFarParams(10 * 86400, now=h.now())) == 0


async def test_the_mover_takes_the_earliest_a_batch_at_a_time(h: Harness) -> None:
    ps = [
        await create(h, far=True, run_at=h.now() + timedelta(minutes=m)) for m in (30, 10, 20)
    ]
    assert await h.store.move_far_jobs(SHARD, MoveFarParams(3600, limit=2, now=h.now())) == 2
    claimed = await h.store.claim_jobs(SHARD, claim(h, at=3600))
    assert [c.id for c in claimed] == [ps[1].id, ps[2].id]


# -- backlog, worker beats, schema ----------------------------------------------


async def test_backlog_counts_due_unclaimed_jobs(h: Harness) -> None:
    for s in (-10, -5, 5):
        await create(h, run_at=h.now() + timedelta(seconds=s))
    await create(h, far=True)  # not in the hot table: not counted
    stats = await h.store.backlog(SHARD, BacklogParams(now=h.now()))
    assert stats.due == 2 and stats.oldest_due_age_seconds == pytest.approx(10.0)
    capped = await h.store.backlog(SHARD, BacklogParams(now=h.now(), cap=1))
    assert capped.due == 1 and capped.oldest_due_age_seconds == pytest.approx(10.0)
    await h.store.claim_jobs(SHARD, claim(h, limit=1))
    stats = await h.store.backlog(SHARD, BacklogParams(now=h.now()))
    assert stats.due == 1 and stats.oldest_due_age_seconds == pytest.approx(5.0)
    empty = await h.store.backlog(1, BacklogParams(now=h.now()))
    assert (empty.due, empty.oldest_due_age_seconds) == (0, 0.0)


async def test_workers_seen_are_those_that_beat_lately(h: Harness) -> None:
    assert await h.store.workers_seen(SHARD, WorkersSeenParams()) == []
    for worker in ("w2", "w1"):
        await h.store.worker_beat(SHARD, WorkerBeatParams(worker))
    await h.store.worker_beat(SHARD, WorkerBeatParams("w1"))  # a second beat is one worker
    assert await h.store.workers_seen(SHARD, WorkersSeenParams()) == ["w1", "w2"]
    assert await h.store.workers_seen(1, WorkersSeenParams()) == []  # per shard


async def test_schema_version_is_the_latest(h: Harness) -> None:
    assert h.store.latest_schema_version >= 1
    for shard in range(h.store.shard_count):
        assert await h.store.schema_version(shard) == h.store.latest_schema_version


async def test_out_of_range_shard_is_a_value_error(h: Harness) -> None:
    with pytest.raises(ValueError, match="out of range"):
        await h.store.claim_jobs(h.store.shard_count, claim(h))
    with pytest.raises(ValueError, match="out of range"):
        await h.store.create_job(-1, job(h))


# -- history retention ----------------------------------------------------------------


async def test_history_and_keys_expire_after_the_retention(h: Harness) -> None:
    done = await create(h, key="done")
    pending = await create(h, key="pending", run_at=h.now() + timedelta(days=60))
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    await finish(h, result(h, c))
    assert (await get(h, done)).status is JobStatus.SUCCEEDED
    # Within the retention, nothing goes.
    keep = MaintainHistoryParams(retention_days=30, today=h.now().date() + timedelta(days=20))
    await h.store.maintain_history(SHARD, keep)
    assert (await get(h, done)).status is JobStatus.SUCCEEDED
    # Forty days on: the finished job, its attempt log and its key are gone...
    later = MaintainHistoryParams(retention_days=30, today=h.now().date() + timedelta(days=40))
    out = await h.store.maintain_history(SHARD, later)
    assert out.purged_keys == 1
    assert await h.store.get_job(SHARD, GetJobParams(done.id, "svc")) is None
    fresh = await h.store.create_job(SHARD, job(h, key="done"))
    assert fresh.created  # the key is free again
    # ...while a pending job keeps its key, however old.
    again = await h.store.create_job(SHARD, job(h, key="pending"))
    assert not again.created and again.job.id == pending.id


async def test_a_key_lives_as_long_as_its_jobs_history(h: Harness) -> None:
    # A job that waited 35 days: its key is older than the retention when it
    # finishes, and must stay as long as the job's history does.
    days = 24 * 3600
    waited = await create(h, key="waited", run_at=h.now() + timedelta(days=35), far=True)
    await h.store.move_far_jobs(SHARD, MoveFarParams(3600, 100, now=h.now() + timedelta(days=35)))
    [c] = await h.store.claim_jobs(SHARD, claim(h, at=35 * days))
    assert c.id == waited.id
    await finish(h, result(h, c), at=35 * days)
    later = MaintainHistoryParams(retention_days=30, today=h.now().date() + timedelta(days=40))
    out = await h.store.maintain_history(SHARD, later)
    assert out.purged_keys == 0
    again = await h.store.create_job(SHARD, job(h, key="waited"))
    assert not again.created and again.job.id == waited.id
    # Once the history is gone too, so is the key.
    gone = MaintainHistoryParams(retention_days=30, today=h.now().date() + timedelta(days=70))
    assert (await h.store.maintain_history(SHARD, gone)).purged_keys == 1


@pytest.mark.parametrize("key", [None, "placed"])
@pytest.mark.parametrize("batch", [False, True])
async def test_a_create_with_a_horizon_is_placed_on_the_stores_clock(
    h: Harness, batch: bool, key: str | None
) -> None:
    # The horizon decides, on the store's clock (PostgreSQL's now()), and the
    # caller's far is not read: here each says the opposite of the horizon.
    later = job(h, run_at=h.now() + timedelta(hours=2), key=key and f"{key}-later")
    soon = job(h, run_at=h.now() + timedelta(minutes=10), key=key and f"{key}-soon")
    later = later._replace(far=False, far_horizon_seconds=3600.0)
    soon = soon._replace(far=True, far_horizon_seconds=3600.0)
    if batch:
        results = await h.store.create_jobs(SHARD, CreateJobsParams((later, soon)))
        assert all(isinstance(r, CreateResult) and r.created for r in results)
    else:
        for p in (later, soon):
            assert (await h.store.create_job(SHARD, p)).created
    # Far jobs are not claimed: only the one due within the horizon is near;
    # the other is the mover's.
    ahead = claim(h, prefetch=3 * 3600)
    assert [j.id for j in await h.store.claim_jobs(SHARD, ahead)] == [soon.id]
    moved = await h.store.move_far_jobs(SHARD, MoveFarParams(horizon_seconds=3 * 3600, now=h.now()))
    assert moved == 1
    assert [j.id for j in await h.store.claim_jobs(SHARD, ahead)] == [later.id]
