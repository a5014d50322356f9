"""A job's labels, on the in-memory store and PostgreSQL alike: set at
create (single, keyed, placed on the database's clock, far, batch), read
back by a get wherever the job is (near, far, history), kept through every
move (the mover, pause and resume, finishing, cancelling, a retry), absent
(None; on PostgreSQL SQL's NULL, not JSON's null) when not given, and
found by a search by exact match in every table."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from cluster.model import (
    CancelParams,
    CreateJobParams,
    CreateJobsParams,
    CreateResult,
    JobSearchParams,
    JobStatus,
    MoveFarParams,
    Outcome,
    PauseJobParams,
    ResumeJobParams,
    RetryJobParams,
)
from tests.contract.conftest import Harness
from tests.contract.test_store_contract import SHARD, claim, finish, get, job, result

OWNER = "svc"
PAY = {"team": "payments", "env": "prod"}


def labelled(h: Harness, labels: dict[str, str] | None, **kw: Any) -> CreateJobParams:
    return job(h, **kw)._replace(labels=labels)


async def created(h: Harness, p: CreateJobParams) -> CreateJobParams:
    out = await h.store.create_job(SHARD, p)
    assert out.created and out.job.labels == p.labels
    return p


async def stored_as_null(h: Harness, p: CreateJobParams) -> bool:
    """On PostgreSQL: the row's labels are SQL's NULL (not JSON's null,
    which a get would read as None too)."""
    if h.kind != "pg":
        return True
    async with h.store.connection(SHARD) as conn:  # type: ignore[attr-defined]
        cur = await conn.execute(
            "SELECT labels IS NULL FROM jobs WHERE id = %(id)s"
            " UNION ALL SELECT labels IS NULL FROM jobs_far WHERE id = %(id)s"
            " UNION ALL SELECT labels IS NULL FROM job_history WHERE id = %(id)s",
            {"id": p.id},
        )
        [(null,)] = await cur.fetchall()
    return bool(null)


async def test_labels_are_kept_by_every_kind_of_create(h: Harness) -> None:
    later = h.now() + timedelta(days=3)
    near = await created(h, labelled(h, PAY))
    keyed = await created(h, labelled(h, {"order": "98213"}, key="order-98213"))
    far = await created(h, labelled(h, {"tier": "gold"}, run_at=later, far=True))
    # Placed on the database's clock: far, as its runAt is beyond the horizon.
    placed = await created(h, labelled(h, {"k8s.io/app": ""}, run_at=later)._replace(far_horizon_seconds=3600.0))
    plain = await created(h, labelled(h, None))
    plain_far = await created(h, labelled(h, None, run_at=later, far=True))
    for p in (near, keyed, far, placed, plain, plain_far):
        assert (await get(h, p)).labels == p.labels
    assert await stored_as_null(h, plain) and await stored_as_null(h, plain_far)


async def test_a_batch_keeps_each_jobs_labels(h: Harness) -> None:
    later = h.now() + timedelta(days=3)
    jobs = (
        labelled(h, PAY),
        labelled(h, None),
        labelled(h, {"a": "1"}, key="batch-1"),
        labelled(h, {"b": "2"}, run_at=later, far=True),
        labelled(h, None, run_at=later)._replace(far_horizon_seconds=3600.0),
    )
    results = await h.store.create_jobs(SHARD, CreateJobsParams(jobs))
    assert all(isinstance(r, CreateResult) and r.created for r in results)
    for p, r in zip(jobs, results, strict=True):
        assert isinstance(r, CreateResult) and r.job.labels == p.labels
        assert (await get(h, p)).labels == p.labels
    assert await stored_as_null(h, jobs[1]) and await stored_as_null(h, jobs[4])


async def test_labels_move_with_the_job_from_far_to_history_and_back(h: Harness) -> None:
    soon = h.now() + timedelta(minutes=5)
    far = await created(h, labelled(h, PAY, run_at=soon, far=True))
    assert await h.store.move_far_jobs(SHARD, MoveFarParams(horizon_seconds=3600, now=h.now())) == 1
    assert (await get(h, far)).labels == PAY
    # Pause and resume copy the row between the hot and the far tables whole.
    await h.store.pause_job(SHARD, PauseJobParams(far.id, OWNER, "hold", now=h.now()))
    assert (await get(h, far)).labels == PAY
    await h.store.resume_job(SHARD, ResumeJobParams(far.id, OWNER, now=h.now()))
    assert (await get(h, far)).labels == PAY
    # Finished: into the history with its labels; retried: back out with them.
    [c] = await h.store.claim_jobs(SHARD, claim(h, at=600))
    await finish(h, result(h, c, Outcome.FAILED, error="HTTP 500"), at=600)
    done = await get(h, far)
    assert done.finished_at is not None and done.labels == PAY
    retried = await h.store.retry_job(SHARD, RetryJobParams(far.id, OWNER, now=h.now()))
    assert retried.labels == PAY and (await get(h, far)).labels == PAY
    # Cancelled: into the history again, labels kept.
    cancelled = await h.store.cancel_job(SHARD, CancelParams(far.id, OWNER, now=h.now()))
    assert cancelled.labels == PAY and (await get(h, far)).labels == PAY
    plain = await created(h, labelled(h, None))
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    await finish(h, result(h, c))
    assert (await get(h, plain)).labels is None and await stored_as_null(h, plain)


async def found(h: Harness, labels: dict[str, str] | None, **kw: Any) -> set[uuid.UUID]:
    params = JobSearchParams(owner=OWNER, labels=labels, **kw)
    return {j.id for j in await h.store.search_jobs(SHARD, params)}


async def test_search_by_labels_finds_exact_matches_in_every_table(h: Harness) -> None:
    later = h.now() + timedelta(days=3)
    cron_id = uuid.uuid4()
    ran = await created(h, labelled(h, {**PAY, "run": "1"}, cron_id=cron_id))
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    await finish(h, result(h, c))
    near = await created(h, labelled(h, PAY, run_at=h.now() + timedelta(minutes=5)))
    far = await created(h, labelled(h, {"team": "payments"}, run_at=later, far=True))
    other = await created(h, labelled(h, {"team": "payments-eu", "env": "prod"}))
    plain = await created(h, labelled(h, None, cron_id=cron_id))
    await created(h, labelled(h, PAY)._replace(owner="other"))
    # Every pair asked must be the job's, exactly (no prefix, no other owner).
    assert await found(h, {"team": "payments"}) == {ran.id, near.id, far.id}
    assert await found(h, PAY) == {ran.id, near.id}
    assert await found(h, {"env": "prod"}) == {ran.id, near.id, other.id}
    assert await found(h, {"team": "pay"}) == set()
    assert await found(h, {"team": "payments", "env": "dev"}) == set()
    # No filter: every job, those without labels too.
    assert await found(h, None) == {ran.id, near.id, far.id, other.id, plain.id}
    assert await found(h, {}) == {ran.id, near.id, far.id, other.id, plain.id}
    # With the other filters, each of the search's statements.
    assert await found(h, PAY, statuses=(JobStatus.SUCCEEDED,)) == {ran.id}
    assert await found(h, PAY, statuses=(JobStatus.SCHEDULED,)) == {near.id}
    assert await found(h, {"team": "payments"}, cron_id=cron_id) == {ran.id}
    assert await found(h, None, cron_id=cron_id) == {ran.id, plain.id}
    assert await found(h, {"run": "1"}, finished_from=h.now() - timedelta(minutes=1)) == {ran.id}
    assert await found(h, {"team": "payments"}, type="NOPE") == set()
