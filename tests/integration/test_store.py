"""What only the PostgreSQL store has: statement metrics, day partitions,
races between statements, and the translation of driver errors.

The state machine's rules (claim, fencing, retries, reaper, release, cancel
and reschedule, far and near, history, batch create) are held by the
contract suite, tests/contract/test_store_contract.py, which runs them on
this store and on the in-memory one alike.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from prometheus_client import REGISTRY

import shardmap
from cluster.clock import FakeClock
from cluster.coordination.base import StaticCoordinator
from cluster.errors import Conflict, ShardUnavailable, StoreError
from cluster.leader.janitor import Janitor
from cluster.leader.loop import LeaderLoop
from cluster.leader.reaper import Reaper
from cluster.model import (
    CancelParams,
    ClaimedJob,
    ClaimParams,
    CreateJobParams,
    CreateJobsParams,
    CreateResult,
    CronRunsParams,
    FinishParams,
    GetCronParams,
    GetJobParams,
    JobResult,
    JobStatus,
    MaintainHistoryParams,
    MoveFarParams,
    Occurrence,
    Outcome,
    PendingParams,
    RescheduleParams,
    RevokeReplacedParams,
    TriggerCronParams,
)
from cluster.store.pgshards import translate_errors
from cluster.store.postgres import PgStore
from cluster.store.postgres.rows import _job_row
from cluster.store.postgres_cron import PgCronStore
from cluster.store.sql import QUERIES
from tests.helpers import cron_record, job_params

pytestmark = pytest.mark.integration
URL = "http://example.test/fire"


def claim(worker: str = "w1", limit: int = 10, lease: float = 30) -> ClaimParams:
    return ClaimParams(worker_id=worker, limit=limit, lease_seconds=lease, grace_seconds=0)


def result(job: ClaimedJob, outcome: Outcome = Outcome.SUCCEEDED) -> JobResult:
    return JobResult(job.lease, outcome, "w1", datetime.now(UTC), 0.01)


def shard_of(p: CreateJobParams) -> int:
    return shardmap.ShardMap(2).shard_of(p.id)


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


async def test_connections_run_without_jit_and_with_their_timeouts(store: PgStore) -> None:
    """JIT compiled a materializer page for 610 ms (its work: 25 ms): off."""
    for shard in (0, 1):
        async with store.connection(shard) as conn:
            cur = await conn.execute(
                "SELECT current_setting('jit'), current_setting('statement_timeout')"
            )
            assert await cur.fetchone() == ("off", "10s")


async def test_leader_loop_stamps_its_last_success(store: PgStore) -> None:
    loop = LeaderLoop(Reaper(store), StaticCoordinator("w1", 2), 2, 5.0)
    started = datetime.now(UTC).timestamp()
    await loop.run_once()
    for shard in ("0", "1"):
        stamp = sample("vakit_maintenance_last_success_timestamp_seconds", loop="reaper", shard=shard)
        assert stamp >= started - 1


# -- driver errors stop at the boundary -------------------------------------------


async def test_a_unique_violation_is_a_conflict_naming_its_constraint(store: PgStore) -> None:
    p = job_params(URL)
    await store.create_job(0, p)
    with pytest.raises(Conflict) as caught:
        await store.create_job(0, p)  # the same id again, no key to make it a repeat
    assert caught.value.fields["constraint"] == "jobs_pkey"
    assert caught.value.fields["sqlstate"] == "23505"
    assert isinstance(caught.value.__cause__, psycopg.errors.UniqueViolation)
    far = job_params(URL, far=True)._replace(id=shardmap.new_uuid())
    await store.create_job(0, far)
    with pytest.raises(Conflict) as caught:
        await store.create_jobs(0, CreateJobsParams((far,)))
    assert caught.value.fields["constraint"] == "jobs_far_pkey"


async def test_a_statement_error_is_a_store_error_with_shard_and_sqlstate(store: PgStore) -> None:
    # The CHECK constraint refuses it: a bug above the store, never a psycopg
    # exception in the API or the worker.
    bad = job_params(URL, max_attempts=0)
    with pytest.raises(StoreError) as caught:
        await store.create_job(1, bad)
    assert caught.value.shard == 1 and caught.value.sqlstate == "23514"
    assert caught.value.fields["shard"] == 1
    assert isinstance(caught.value.__cause__, psycopg.errors.CheckViolation)
    with pytest.raises(StoreError):
        await store.create_jobs(1, CreateJobsParams((bad,)))
    # A statement the server refuses to run at all (sent through the same
    # translation PgCronStore uses).
    with pytest.raises(StoreError) as caught:
        async with store.connection(0) as conn:
            await conn.execute("SELECT * FROM no_such_table")
    assert caught.value.sqlstate == "42P01"


async def test_creates_that_arrive_together_are_one_statement_and_each_its_own_outcome(
    store: PgStore,
) -> None:
    # Keyless creates sent at once go to the shard together (one statement);
    # the one the shard refuses fails alone, the others are made.
    jobs = [job_params(URL, payload={"n": i}) for i in range(30)]
    jobs[17] = job_params(URL, max_attempts=0)  # its CHECK refuses it
    batches = sample("vakit_store_query_seconds_count", shard="0", query="insert_jobs_batch")
    outcomes = await asyncio.gather(*(store.create_job(0, p) for p in jobs), return_exceptions=True)
    assert isinstance(outcomes[17], StoreError) and outcomes[17].sqlstate == "23514"
    made = [o for i, o in enumerate(outcomes) if i != 17]
    assert all(isinstance(o, CreateResult) and o.created for o in made), made
    for p in jobs[:17] + jobs[18:]:
        found = await store.get_job(0, GetJobParams(p.id, p.owner))
        assert found is not None and found.payload == p.payload
    assert await store.get_job(0, GetJobParams(jobs[17].id, jobs[17].owner)) is None
    # They did go together.
    assert sample("vakit_store_query_seconds_count", shard="0", query="insert_jobs_batch") > batches


async def test_translate_errors_leaves_other_errors_alone() -> None:
    with pytest.raises(KeyError), translate_errors(0):
        raise KeyError("not a driver error")
    with pytest.raises(ShardUnavailable), translate_errors(3):
        raise psycopg.OperationalError("connection refused")


async def test_an_unreachable_shard_is_unavailable() -> None:
    store = PgStore(["postgresql://vakit@127.0.0.1:1/nothing"], timeout=1.0)
    await store.open()
    try:
        with pytest.raises(ShardUnavailable) as caught:
            await store.claim_jobs(0, claim())
        assert caught.value.shard == 0
    finally:
        await store.close()


# -- day partitions (the janitor) -----------------------------------------------------


async def test_janitor_makes_and_drops_day_partitions(store: PgStore) -> None:
    today = datetime.now(UTC).date()
    far_past = today - timedelta(days=40)
    first = await store.maintain_history(0, MaintainHistoryParams(30, today=far_past))
    assert first.made_partitions > 0
    result = await store.maintain_history(0, MaintainHistoryParams(30, today=today))
    assert result.dropped_partitions and all(
        n[-8:] < (today - timedelta(days=30)).strftime("%Y%m%d") for n in result.dropped_partitions
    )


async def test_janitor_takes_today_from_its_clock_or_the_database(store: PgStore) -> None:
    today = datetime.now(UTC).date()
    # An injected clock 40 days back makes that day's partitions...
    clock = FakeClock(datetime.now(UTC) - timedelta(days=40))
    await Janitor(store, 30, clock).run_once(0)
    # ...and the database's today, without a clock, drops them.
    dropped = await Janitor(store, 30).run_once(0)
    assert dropped > 0
    again = await store.maintain_history(0, MaintainHistoryParams(30))
    assert again.dropped_partitions == [] and again.made_partitions == 0
    names = await store.fetch(0, "list_partitions", {})
    assert f"job_history_p{today:%Y%m%d}" in {r["name"] for r in names}


async def test_janitors_at_once_all_succeed(store: PgStore) -> None:
    """Two leaders overlap for a moment when leadership moves. Passes that make
    and drop partitions of one parent at once failed in PostgreSQL ("could not
    find tuple for parent of relation", CI, and here within 60 rounds of five);
    they take turns now, and each day is made once."""
    first = datetime.now(UTC).date() + timedelta(days=100)
    for n in range(60):
        # Ten days on each round: a round makes 8 days, and from the fifth
        # on drops 8 days made four and five rounds before.
        params = MaintainHistoryParams(30, today=first + timedelta(days=10 * n))
        results = await asyncio.gather(*(store.maintain_history(0, params) for _ in range(5)))
        assert sum(r.made_partitions for r in results) == 2 * 8  # two tables, 8 days, made once
        if n >= 4:
            assert sum(len(r.dropped_partitions) for r in results) >= 2 * 8


async def test_a_janitor_pass_prunes_every_expired_ledger_row_and_key(
    store: PgStore, shard_dsns: list[str]
) -> None:
    # Batches of two: one pass deletes all that expired, however many
    # batches that takes (one batch an hourly pass let keys pile up).
    crons = PgCronStore(store)
    now = datetime.now(UTC)
    cron = cron_record(next_fire_at=now + timedelta(hours=1), type="nightly")
    await crons.create(0, cron)
    for minutes in range(5):
        at = now - timedelta(minutes=minutes)
        occ = Occurrence(shardmap.new_uuid(shardmap.slot_of(cron.id)), at, at, None)
        assert await crons.trigger(0, TriggerCronParams(cron, occ))
    keyed = [job_params(URL, key=f"k{i}") for i in range(5)]
    for p in keyed:
        assert (await store.create_job(shard_of(p), p)).created
    for shard in (0, 1):
        claimed = await store.claim_jobs(shard, claim(limit=20))
        await store.finish_jobs(shard, FinishParams(tuple(result(j) for j in claimed)))

    def left() -> tuple[int, int]:
        counts = [0, 0]
        for dsn in shard_dsns:
            with psycopg.connect(dsn) as conn:
                for i, table in enumerate(("cron_occurrences", "job_keys")):
                    row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                    assert row is not None
                    counts[i] += row[0]
        return counts[0], counts[1]

    assert left() == (5, 5)
    # Within the retention, nothing goes; forty days on, all of it.
    for days, expected in ((20, (5, 5)), (40, (0, 0))):
        clock = FakeClock(now + timedelta(days=days))
        for shard in (0, 1):
            await Janitor(store, 30, clock, crons=crons, batch=2).run_once(shard)
        assert left() == expected


# -- races between statements -----------------------------------------------------------


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
            while n := await store.move_far_jobs(shard, MoveFarParams(3 * 3600, limit=20)):
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


async def test_replace_revokes_the_running_occurrences_made_under_it(store: PgStore) -> None:
    # An occurrence carries the policy it was made with (revoke_replaced,
    # migration 16): one made while the cron was ALLOW runs on after the
    # cron became REPLACE. (MemStore's jobs carry no policy.)
    crons = PgCronStore(store)
    now = datetime.now(UTC)
    cron = cron_record(next_fire_at=now + timedelta(hours=1), type="replace")
    await crons.create(0, cron)

    def occ(seconds: float) -> Occurrence:
        at = now + timedelta(seconds=seconds)
        return Occurrence(shardmap.new_uuid(shardmap.slot_of(cron.id)), at, at, None)

    before = occ(-30)
    assert await crons.trigger(0, TriggerCronParams(cron, before))
    saved = await crons.get(0, GetCronParams(cron.id, cron.owner))
    assert saved is not None
    cron = await crons.update(0, dataclasses.replace(saved, concurrency="REPLACE"))
    old, new, waiting = occ(-20), occ(-10), occ(3600)
    for o in (old, new, waiting):
        assert await crons.trigger(0, TriggerCronParams(cron, o))
    claimed = {j.id: j for j in await store.claim_jobs(0, ClaimParams("w", 10, 30, 0))}
    assert claimed.keys() == {before.job_id, old.job_id, new.job_id}
    assert [claimed[o.job_id].concurrency for o in (before, old, new)] == ["ALLOW", "REPLACE", "REPLACE"]
    assert await store.revoke_replaced(0, RevokeReplacedParams(cron.id, new.job_id)) == 1
    runs = {r.job_id: r.status for r in await crons.runs(0, CronRunsParams(cron.id, 10))}
    assert runs == {
        before.job_id: "RUNNING", old.job_id: "CANCELLED", new.job_id: "RUNNING", waiting.job_id: "SCHEDULED",
    }  # fmt: skip
    assert (await crons.pending(0, PendingParams((cron.id,))))[cron.id].pending == 3

    def done(job_id: uuid.UUID) -> FinishParams:
        return FinishParams((JobResult(claimed[job_id].lease, Outcome.SUCCEEDED, "w", datetime.now(UTC), 0.0),))

    # The revoked occurrence's worker is fenced.
    assert await store.finish_jobs(0, done(old.job_id)) == set()
    assert await store.finish_jobs(0, done(new.job_id)) == {new.job_id}


async def test_a_create_tried_again_is_placed_by_its_horizon_and_written_once(store: PgStore) -> None:
    # insert_job_again (a create whose link failed after it was sent) places
    # the job as the first try did: on the shard's clock when it has a
    # horizon, and never twice.
    later = job_params("http://t.test/x", run_at=datetime.now(UTC) + timedelta(hours=2))
    later = later._replace(far_horizon_seconds=3600.0)
    soon = job_params("http://t.test/x", run_at=datetime.now(UTC) + timedelta(minutes=5), far=True)
    soon = soon._replace(far_horizon_seconds=3600.0)
    async with store.connection(0) as conn:
        for p in (later, soon, later):
            await conn.execute(QUERIES["insert_job_again"], _job_row(p))
    ahead = ClaimParams("w", 10, 30, 0, prefetch_seconds=3 * 3600)
    assert [j.id for j in await store.claim_jobs(0, ahead)] == [soon.id]
    assert await store.move_far_jobs(0, MoveFarParams(3 * 3600)) == 1
    assert [j.id for j in await store.claim_jobs(0, ahead)] == [later.id]
