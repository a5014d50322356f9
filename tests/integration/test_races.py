"""Leader work racing live writes, on real PostgreSQL, each side on its own pool:

* the mover carrying far jobs into the hot table while the API cancels
  (DELETE) and moves (PATCH) the very jobs it carries;
* the history janitor creating and dropping day partitions while workers
  finish jobs into today's.

Invariants: every change the store acknowledged holds, wherever the job ended
up; no job is lost or doubled; neither side sees an error.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import shardmap
from cluster.model import (
    CancelParams,
    ClaimParams,
    CreateJobParams,
    FinishParams,
    JobResult,
    JobStatus,
    MaintainHistoryParams,
    MoveFarParams,
    Outcome,
    RescheduleParams,
)
from cluster.store.postgres import PgStore
from tests.helpers import job_params
from tests.shards import rows

SHARD = 0


def ids_on(shards: shardmap.ShardMap, count: int) -> list[uuid.UUID]:
    slots = [s for s in range(shardmap.SLOTS) if shards.shard_of_slot(s) == SHARD]
    return [shardmap.new_uuid(random.choice(slots)) for _ in range(count)]


@pytest.fixture
async def other(shard_dsns: list[str]) -> AsyncIterator[PgStore]:
    """A second store on the same shards: the leader's pool, apart from the API's."""
    s = PgStore(shard_dsns, max_size=4, timeout=3.0)
    await s.open()
    yield s
    await s.close()


async def test_the_mover_racing_cancels_and_patches_of_its_jobs(
    store: PgStore, other: PgStore, shard_dsns: list[str]
) -> None:
    shards = shardmap.ShardMap(store.shard_count)
    now = datetime.now(UTC)
    due = now + timedelta(minutes=10)  # within the mover's horizon
    jobs = [
        job_params("http://t/x", run_at=due, far=True)._replace(id=i)
        for i in ids_on(shards, 600)
    ]
    for p in jobs:
        await store.create_job(SHARD, p)
    cancel = jobs[0::2]
    patch = jobs[1::2]
    moved_to = now + timedelta(minutes=30)
    moving = True

    async def mover() -> int:
        total = 0
        while moving:
            total += await other.move_far_jobs(SHARD, MoveFarParams(3600, limit=7))
        return total + await other.move_far_jobs(SHARD, MoveFarParams(3600, limit=10_000))

    cancelling = {p.id for p in cancel}

    async def change(batch: list[CreateJobParams]) -> None:
        for p in batch:
            if p.id in cancelling:
                job = await store.cancel_job(SHARD, CancelParams(p.id, "svc"))
                assert job.status is JobStatus.CANCELLED
            else:
                job = await store.reschedule_job(SHARD, RescheduleParams(p.id, "svc", moved_to))
                assert job.run_at == moved_to and job.status is JobStatus.SCHEDULED

    order = [*jobs]
    random.shuffle(order)
    task = asyncio.create_task(mover())
    await asyncio.gather(*(change(order[i::6]) for i in range(6)))
    moving = False
    moved = await task
    cancelled = {
        r[0] for r in rows(shard_dsns, "SELECT id FROM job_history WHERE status = 'CANCELLED'")
    }
    near = dict(rows(shard_dsns, "SELECT id, run_at FROM jobs"))
    far = dict(rows(shard_dsns, "SELECT id, run_at FROM jobs_far"))
    assert cancelled == {p.id for p in cancel}
    assert not (set(near) & set(far))
    assert set(near) | set(far) == {p.id for p in patch}
    assert set(near.values()) | set(far.values()) == {moved_to}
    assert far == {}  # the last pass moved every job left
    assert moved >= len(near)
    print(
        f"\nmover vs cancel/patch: {moved} moved while {len(cancel)} cancelled, {len(patch)} patched"
    )


async def test_the_janitor_racing_completions_into_a_day_without_its_partition(
    store: PgStore, other: PgStore, shard_dsns: list[str]
) -> None:
    shards = shardmap.ShardMap(store.shard_count)
    jobs = [job_params("http://t/x")._replace(id=i) for i in ids_on(shards, 800)]
    for p in jobs:
        await store.create_job(SHARD, p)
    # The state of a shard whose janitor has not run for longer than the
    # week it makes ahead: today has no partition, so completions land in
    # the default one while the janitor comes back and makes the days.
    today = datetime.now(UTC).date()
    days = [today + timedelta(days=d) for d in range(4)]
    with psycopg.connect(shard_dsns[SHARD], autocommit=True) as conn:
        for day in days:
            for table in ("job_history", "job_attempts"):
                conn.execute(f"DROP TABLE IF EXISTS {table}_p{day:%Y%m%d}")
    working = True
    passes = 0

    async def janitor() -> None:
        nonlocal passes
        while working:
            await other.maintain_history(SHARD, MaintainHistoryParams(retention_days=1))
            passes += 1

    async def worker(name: str, batches: int = 10**9) -> int:
        done = 0
        for _ in range(batches):
            claimed = await store.claim_jobs(
                SHARD, ClaimParams(worker_id=name, limit=13, lease_seconds=60, grace_seconds=0)
            )
            if not claimed:
                return done
            now = datetime.now(UTC)
            results = tuple(JobResult(c.lease, Outcome.SUCCEEDED, name, now, 0.0) for c in claimed)
            done += len(await store.finish_jobs(SHARD, FinishParams(results)))
        return done

    # Some of today's rows are in the default partition before the janitor
    # comes back; the rest finish while it works.
    early = await worker("w-early", batches=4)
    task = asyncio.create_task(janitor())
    finished = [early, *await asyncio.gather(*(worker(f"w{i}") for i in range(3)))]
    working = False
    await task  # the janitor's passes all succeeded
    assert sum(finished) == len(jobs)
    found = rows(shard_dsns, "SELECT id, status FROM job_history")
    assert sorted(r[0] for r in found) == sorted(p.id for p in jobs)
    assert {r[1] for r in found} == {"SUCCEEDED"}
    assert rows(shard_dsns, "SELECT id FROM jobs") == []
    # The days after today got their partitions all the same; today's rows
    # stay in the default partition.
    made = rows(
        shard_dsns[SHARD : SHARD + 1],
        "SELECT relname FROM pg_class WHERE relname = ANY(%(names)s)",
        {"names": [f"job_history_p{day:%Y%m%d}" for day in days]},
    )
    assert sorted(r[0] for r in made) == [f"job_history_p{day:%Y%m%d}" for day in days[1:]]
    print(f"\njanitor vs completions: {passes} janitor passes while {len(jobs)} jobs finished")
