"""The slot fence inside each write (issue 42): a shard refuses, inside the
write's own transaction, every write for a slot it does not serve; and the
store operations a slot's move is made of (fence, barrier, copy, clean).

Each test of a refused write asserts both that the write is refused and
that the row is as it was: with the fence taken out of a statement (its
``{fence…}`` in cluster/store/sql), the write goes through and the test
fails.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import shardmap
from cluster.errors import ShardUnavailable, SlotMoving
from cluster.model import (
    CancelParams,
    ClaimParams,
    CreateJobsParams,
    DeleteCronParams,
    FinishParams,
    HeartbeatParams,
    JobResult,
    JobStatus,
    MaterializeBatchParams,
    MaterializeParams,
    MoveFarParams,
    Occurrence,
    Outcome,
    ReapParams,
    RescheduleParams,
    RetryJobParams,
)
from cluster.store.contracts.moves import MOVABLE_TABLES
from cluster.store.postgres import PgStore
from cluster.store.postgres.moves import PgSlotMoves
from cluster.store.postgres_cron import PgCronStore
from tests.helpers import cron_record, job_params

pytestmark = pytest.mark.integration

URL = "http://x.test/"


@pytest.fixture
async def moves(store: PgStore) -> PgSlotMoves:
    return PgSlotMoves(store)


@pytest.fixture
def crons(store: PgStore) -> PgCronStore:
    return PgCronStore(store)


def in_slot(slot: int, **over: Any) -> Any:
    """A create of a job in ``slot``."""
    return job_params(URL, **over)._replace(id=shardmap.new_uuid(slot))


def row(dsn: str, table: str, job_id: uuid.UUID) -> tuple[Any, ...] | None:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            f"SELECT status, attempt, run_at, lease_until, locked_by FROM {table} WHERE id = %s",
            (job_id,),
        ).fetchone()


def table_rows(dsn: str, table: str, slots: list[int]) -> list[tuple[Any, ...]]:
    """Every row of ``table`` in ``slots`` as text, in a stable order."""
    column = {"job_keys": "job_id", "cron_occurrences": "cron_id"}.get(table, "id")
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            f"SELECT t::text FROM {table} t WHERE vakit_slot({column}) = ANY(%s) ORDER BY 1",
            (slots,),
        ).fetchall()


def running_leases(dsn: str, slots: list[int]) -> dict[Any, tuple[int, str, datetime]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, attempt, locked_by, lease_until FROM jobs"
            " WHERE status = 'RUNNING' AND vakit_slot(id) = ANY(%s)",
            (slots,),
        ).fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def test_vakit_slot_is_shardmap_slot_of(shard_dsns: list[str]) -> None:
    ids = [shardmap.new_uuid() for _ in range(3000)]
    ids += [shardmap.new_uuid(s) for s in (0, 1, 15, 16, 255, 256, 2048, 4095)]
    with psycopg.connect(shard_dsns[0]) as conn:
        got = conn.execute("SELECT vakit_slot(i) FROM unnest(%s::uuid[]) i", (ids,)).fetchall()
    assert [g for (g,) in got] == [shardmap.slot_of(i) for i in ids]


# --- The API's writes: refused with SlotMoving, nothing written ------------------


async def test_creates_of_a_fenced_slot_are_refused(
    store: PgStore, moves: PgSlotMoves, shard_dsns: list[str]
) -> None:
    await moves.fence_slots(0, [10], "moving")
    later = datetime.now(UTC) + timedelta(hours=1)
    attempts = {
        "keyless": in_slot(10),
        "far": in_slot(10, run_at=later, far=True),
        "placed": in_slot(10)._replace(far_horizon_seconds=60.0),
        "keyed": job_params(URL, key="k-10")._replace(id=shardmap.new_uuid(10)),
    }
    for what, params in attempts.items():
        with pytest.raises(SlotMoving) as refused:
            await store.create_job(0, params)
        assert (refused.value.shard, refused.value.slot, refused.value.retry_after) == (0, 10, 1), (
            what
        )
        for table in ("jobs", "jobs_far"):
            assert row(shard_dsns[0], table, params.id) is None, what
    with psycopg.connect(shard_dsns[0]) as conn:
        assert conn.execute("SELECT count(*) FROM job_keys").fetchone() == (0,)
    # A batch with one job of a fenced slot is refused as a whole (each of
    # its jobs answers SlotMoving); nothing of it is written.
    batch = (
        in_slot(12),
        in_slot(10),
        job_params(URL, key="k-b")._replace(id=shardmap.new_uuid(12)),
    )
    with pytest.raises(SlotMoving):
        await store.create_jobs(0, CreateJobsParams(batch))
    assert all(row(shard_dsns[0], "jobs", p.id) is None for p in batch)
    # Served again once the fence is lifted: the fence was what refused.
    await moves.unfence_slots(0, [10])
    for params in attempts.values():
        assert (await store.create_job(0, params)).created


async def test_coalesced_keyless_creates_are_refused_one_by_one(
    store: PgStore, moves: PgSlotMoves, shard_dsns: list[str]
) -> None:
    """Keyless creates that arrive together are one statement: a fenced
    job among them fails alone, the others are made."""
    await moves.fence_slots(0, [20], "moving")
    jobs = [in_slot(20 if i % 5 == 0 else 22) for i in range(30)]
    results = await asyncio.gather(*(store.create_job(0, p) for p in jobs), return_exceptions=True)
    for params, result in zip(jobs, results, strict=True):
        made = row(shard_dsns[0], "jobs", params.id)
        if shardmap.slot_of(params.id) == 20:
            assert isinstance(result, SlotMoving) and made is None
        else:
            assert not isinstance(result, BaseException) and made is not None


async def test_patch_cancel_and_retry_of_a_fenced_slot_are_refused(
    store: PgStore, moves: PgSlotMoves, shard_dsns: list[str]
) -> None:
    near = in_slot(30, run_at=datetime.now(UTC) + timedelta(minutes=5))
    far = in_slot(30, run_at=datetime.now(UTC) + timedelta(days=2), far=True)
    done = in_slot(30)
    for p in (near, far, done):
        await store.create_job(0, p)
    [claimed] = await store.claim_jobs(0, ClaimParams("w", 10, 60, 0))
    await store.finish_jobs(
        0, FinishParams((JobResult(claimed.lease, Outcome.FAILED, "w", None, None, "boom"),))
    )
    before = {
        p.id: (row(shard_dsns[0], "jobs", p.id), row(shard_dsns[0], "jobs_far", p.id))
        for p in (near, far)
    }
    await moves.fence_slots(0, [30], "absent")
    for p in (near, far):
        later = datetime.now(UTC) + timedelta(hours=3)
        with pytest.raises(SlotMoving):
            await store.reschedule_job(0, RescheduleParams(p.id, p.owner, later))
        with pytest.raises(SlotMoving):
            await store.cancel_job(0, CancelParams(p.id, p.owner))
        assert (row(shard_dsns[0], "jobs", p.id), row(shard_dsns[0], "jobs_far", p.id)) == before[
            p.id
        ]
    with pytest.raises(SlotMoving):
        await store.retry_job(
            0, RetryJobParams(done.id, done.owner, statuses=frozenset({JobStatus.FAILED}))
        )
    assert row(shard_dsns[0], "jobs", done.id) is None
    await moves.unfence_slots(0, [30])
    await store.cancel_job(0, CancelParams(near.id, near.owner))
    assert row(shard_dsns[0], "jobs", near.id) is None


# --- The worker's and the leader's writes: the fenced slot is not seen --------------


async def test_claim_reap_and_far_mover_skip_a_fenced_slot(
    store: PgStore, moves: PgSlotMoves, shard_dsns: list[str]
) -> None:
    fenced, served = in_slot(40), in_slot(42)
    far_fenced = in_slot(40, run_at=datetime.now(UTC) + timedelta(seconds=30), far=True)
    for p in (fenced, served, far_fenced):
        await store.create_job(0, p)
    await moves.fence_slots(0, [40], "moving")
    claimed = await store.claim_jobs(0, ClaimParams("w", 10, 60, 0))
    assert [j.id for j in claimed] == [served.id]
    assert row(shard_dsns[0], "jobs", fenced.id)[:2] == ("SCHEDULED", 0)  # type: ignore[index]
    assert await store.move_far_jobs(0, MoveFarParams(horizon_seconds=3600)) == 0
    assert row(shard_dsns[0], "jobs_far", far_fenced.id) is not None
    # A RUNNING job of the slot whose lease ran out is not reaped here.
    await moves.unfence_slots(0, [40])
    [running] = await store.claim_jobs(0, ClaimParams("w", 10, 60, 0))
    await moves.fence_slots(0, [40], "moving")
    far_future = datetime.now(UTC) + timedelta(hours=1)
    result = await store.reap_expired(0, ReapParams(now=far_future))
    assert (result.rescheduled, result.failed) == (1, 0)  # the served slot's job only
    assert row(shard_dsns[0], "jobs", running.id)[:2] == ("RUNNING", 1)  # type: ignore[index]


async def test_heartbeat_and_finish_of_a_fenced_slot_are_refused_and_the_rest_written(
    store: PgStore, moves: PgSlotMoves, shard_dsns: list[str]
) -> None:
    fenced, served = in_slot(50), in_slot(52)
    for p in (fenced, served):
        await store.create_job(0, p)
    claimed = {j.id: j for j in await store.claim_jobs(0, ClaimParams("w", 10, 60, 0))}
    assert set(claimed) == {fenced.id, served.id}
    before = row(shard_dsns[0], "jobs", fenced.id)
    await moves.fence_slots(0, [50], "moving")
    leases = tuple(j.lease for j in claimed.values())
    with pytest.raises(SlotMoving) as beat:
        await store.heartbeat(0, HeartbeatParams(leases, lease_seconds=600, grace_seconds=0))
    assert (beat.value.written, beat.value.refused) == (
        frozenset({served.id}),
        frozenset({fenced.id}),
    )
    assert row(shard_dsns[0], "jobs", fenced.id) == before  # the lease was not extended
    results = tuple(
        JobResult(j.lease, Outcome.SUCCEEDED, "w", None, None) for j in claimed.values()
    )
    with pytest.raises(SlotMoving) as finish:
        await store.finish_jobs(0, FinishParams(results))
    assert (finish.value.written, finish.value.refused) == (
        frozenset({served.id}),
        frozenset({fenced.id}),
    )
    assert row(shard_dsns[0], "jobs", fenced.id) == before  # still RUNNING, same attempt and lease
    assert row(shard_dsns[0], "jobs", served.id) is None  # finished: in the history


# --- Crons ------------------------------------------------------------------------


async def test_cron_writes_and_materializing_of_a_fenced_slot(
    crons: PgCronStore, moves: PgSlotMoves, shard_dsns: list[str]
) -> None:
    now = datetime.now(UTC)
    due = now - timedelta(seconds=1)
    cron = cron_record(name="fenced", next_fire_at=due, id=shardmap.new_uuid(60))
    other = cron_record(name="served", next_fire_at=due, id=shardmap.new_uuid(62))
    await moves.fence_slots(0, [60], "absent")
    with pytest.raises(SlotMoving):
        await crons.create(0, cron)
    with pytest.raises(SlotMoving):
        await crons.create_many(0, [other, cron])
    with psycopg.connect(shard_dsns[0]) as conn:
        assert conn.execute("SELECT count(*) FROM cron_jobs").fetchone() == (0,)
    await moves.unfence_slots(0, [60])
    await crons.create(0, cron)
    await crons.create(0, other)
    await moves.fence_slots(0, [60], "moving")
    with pytest.raises(SlotMoving):
        await crons.update(0, dataclasses.replace(cron, schedule="*/5 * * * *", fingerprint="fp2"))
    with pytest.raises(SlotMoving):
        await crons.delete(0, DeleteCronParams(cron.id, cron.owner))

    def item(c: Any) -> MaterializeParams:
        occ = Occurrence(shardmap.new_uuid(shardmap.slot_of(c.id)), due, due, None)
        return MaterializeParams(c.id, due, (occ,), due + timedelta(hours=1), due, runs=1)

    result = await crons.materialize(
        0, MaterializeBatchParams((item(cron), item(other)), now=now, far_horizon_seconds=3600)
    )
    assert result.advanced == {other.id} and result.created == 1
    with psycopg.connect(shard_dsns[0]) as conn:
        kept = conn.execute(
            "SELECT schedule, next_fire_at, run_count FROM cron_jobs WHERE id = %s", (cron.id,)
        ).fetchone()
        assert kept == (cron.schedule, due, 0)
        assert conn.execute(
            "SELECT count(*) FROM cron_occurrences WHERE cron_id = %s", (cron.id,)
        ).fetchone() == (0,)


# --- Moving: keys, copy, clean, barrier ---------------------------------------------


async def test_one_job_per_idempotency_key_across_a_copy(
    store: PgStore, moves: PgSlotMoves
) -> None:
    first = job_params(URL, key="order-1")
    slot = shardmap.slot_of(first.id)
    assert (await store.create_job(0, first)).created
    await moves.fence_slots(1, [slot], "absent")  # a new owner starts with it absent
    await moves.fence_slots(0, [slot], "moving")
    await moves.wait_for_older_transactions(0, 5.0)
    copied = await moves.copy_slots(0, 1, [slot])
    assert copied["jobs"] == 1 and copied["job_keys"] == 1
    await moves.unfence_slots(1, [slot])
    await moves.fence_slots(0, [slot], "absent")
    # The same key through a router at the new map, and one at the old.
    again = job_params(URL, key="order-1")
    repeat = await store.create_job(1, again)
    assert not repeat.created and repeat.job.id == first.id
    with pytest.raises(SlotMoving):
        await store.create_job(0, job_params(URL, key="order-1"))


async def _seed(store: PgStore, crons: PgCronStore, slots: list[int]) -> None:
    """Every kind of movable row, in ``slots`` and in others."""
    soon = datetime.now(UTC) + timedelta(minutes=10)
    for i, slot in enumerate(slots + [s + 1 for s in slots]):
        await store.create_job(0, in_slot(slot))
        await store.create_job(0, in_slot(slot, run_at=soon + timedelta(days=3), far=True))
        keyed = job_params(URL, key=f"key-{i}")
        await store.create_job(0, keyed._replace(id=shardmap.new_uuid(slot)))
        cron = cron_record(name=f"cron-{i}", next_fire_at=soon, id=shardmap.new_uuid(slot))
        await crons.create(0, cron)
        occ = Occurrence(shardmap.new_uuid(slot), soon, soon, None)
        item = MaterializeParams(cron.id, soon, (occ,), soon + timedelta(hours=1), soon, runs=1)
        await crons.materialize(
            0, MaterializeBatchParams((item,), now=datetime.now(UTC), far_horizon_seconds=3600)
        )
    await store.claim_jobs(0, ClaimParams("w", 4, 120, 0))  # some RUNNING, with leases


async def test_copy_and_delete_are_complete_and_idempotent(
    store: PgStore,
    crons: PgCronStore,
    moves: PgSlotMoves,
    shard_dsns: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slots = [100, 200, 300]
    await _seed(store, crons, slots)
    await moves.fence_slots(0, slots, "moving")
    source = {t: table_rows(shard_dsns[0], t, slots) for t in MOVABLE_TABLES}
    assert all(source[t] for t in MOVABLE_TABLES)
    assert any("RUNNING" in r[0] for r in source["jobs"])
    # A copy cut short (the source's connection lost after three of the five
    # tables): nothing of it stays on the target, not even its fence.
    real = moves._copy_table
    tables: list[str] = []

    async def cut(src: Any, dst: Any, source_shard: int, table: str, wanted: list[int]) -> int:
        tables.append(table)
        if len(tables) == 4:
            raise psycopg.OperationalError("the source went away")
        return await real(src, dst, source_shard, table, wanted)

    with monkeypatch.context() as patched:
        patched.setattr(moves, "_copy_table", cut)
        with pytest.raises(ShardUnavailable):
            await moves.copy_slots(0, 1, slots)
    assert set((await moves.slot_rows(1, slots)).values()) == {0}
    assert await moves.fenced_slots(1) == {}
    # Run again, it copies every row and fences the slots 'copied' with
    # them; a third run (a mover resumed after that commit) copies nothing.
    copied = await moves.copy_slots(0, 1, slots)
    assert copied == {t: len(source[t]) for t in MOVABLE_TABLES}
    assert await moves.fenced_slots(1) == dict.fromkeys(slots, "copied")
    assert set((await moves.copy_slots(0, 1, slots)).values()) == {0}
    # Row for row as on the source: RUNNING jobs with attempt and worker; their
    # lease is the source's, or a minute from the copy if that is later (the
    # holder could not renew it while the slot was fenced).
    target = {t: table_rows(shard_dsns[1], t, slots) for t in MOVABLE_TABLES}
    assert {t: r for t, r in target.items() if t != "jobs"} == {
        t: r for t, r in source.items() if t != "jobs"
    }
    assert (
        running_leases(shard_dsns[1], slots).keys() == running_leases(shard_dsns[0], slots).keys()
    )
    for jid, (attempt, worker, lease) in running_leases(shard_dsns[1], slots).items():
        was = running_leases(shard_dsns[0], slots)[jid]
        assert (attempt, worker) == was[:2] and lease >= was[2]
        assert lease >= datetime.now(UTC) + timedelta(seconds=50)
    unchanged = "SELECT t::text FROM jobs t WHERE vakit_slot(id) = ANY(%s) AND status <> 'RUNNING' ORDER BY 1"
    with psycopg.connect(shard_dsns[0]) as a, psycopg.connect(shard_dsns[1]) as b:
        assert (
            a.execute(unchanged, (slots,)).fetchall() == b.execute(unchanged, (slots,)).fetchall()
        )
    assert await moves.slot_rows(1, slots) == {t: len(source[t]) for t in MOVABLE_TABLES}
    assert await moves.slot_rows(1) == await moves.slot_rows(1, slots)  # nothing of other slots
    others = [s + 1 for s in slots]
    kept = {t: table_rows(shard_dsns[0], t, others) for t in MOVABLE_TABLES}
    deleted = await moves.delete_slots(0, slots)
    assert deleted == {t: len(source[t]) for t in MOVABLE_TABLES}
    assert set((await moves.slot_rows(0, slots)).values()) == {0}
    assert set((await moves.delete_slots(0, slots)).values()) == {0}
    assert {t: table_rows(shard_dsns[0], t, others) for t in MOVABLE_TABLES} == kept


async def test_a_rolled_back_copy_leaves_the_target_as_it_was(
    store: PgStore, crons: PgCronStore, moves: PgSlotMoves, shard_dsns: list[str]
) -> None:
    slots = [700, 800]
    await _seed(store, crons, slots)
    await moves.fence_slots(0, slots, "moving")
    copied = await moves.copy_slots(0, 1, slots)
    assert all(copied.values())
    # Cancelled before the flip: the target's copy and its 'copied' fence
    # go together, and the slots are absent there (it does not own them).
    assert await moves.discard_copy(1, slots) == copied
    assert set((await moves.slot_rows(1, slots)).values()) == {0}
    assert await moves.fenced_slots(1) == dict.fromkeys(slots, "absent")
    # A later move of the same slots copies them whole again.
    assert await moves.copy_slots(0, 1, slots) == copied
    assert await moves.slot_rows(1, slots) == await moves.slot_rows(0, slots)


async def test_due_within_counts_the_slots_jobs_and_crons(
    store: PgStore, crons: PgCronStore, moves: PgSlotMoves
) -> None:
    soon = datetime.now(UTC) + timedelta(seconds=30)
    for slot in (5, 5, 6, 7):
        await store.create_job(0, in_slot(slot, run_at=soon))
    await store.create_job(0, in_slot(5, run_at=soon + timedelta(hours=2)))
    await crons.create(0, cron_record(name="c5", next_fire_at=soon, id=shardmap.new_uuid(5)))
    assert await moves.due_within(0, [5], 60) == 3
    assert await moves.due_within(0, [5, 6], 60) == 4
    assert await moves.due_within(0, [5], 4 * 3600) == 4


async def test_the_barrier_waits_for_transactions_older_than_the_fence(
    moves: PgSlotMoves, shard_dsns: list[str]
) -> None:
    await moves.wait_for_older_transactions(0, 1.0)  # none open: at once
    older = await psycopg.AsyncConnection.connect(shard_dsns[0])
    try:
        await older.execute("SELECT count(*) FROM jobs")  # a transaction, left open
        await moves.fence_slots(0, [1], "moving")
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await moves.wait_for_older_transactions(0, 0.3)
        assert time.monotonic() - started >= 0.3

        async def end_later() -> None:
            await asyncio.sleep(0.5)
            await older.commit()

        ender = asyncio.create_task(end_later())
        started = time.monotonic()
        await moves.wait_for_older_transactions(0, 10.0)
        assert time.monotonic() - started >= 0.4 and ender.done()
    finally:
        await older.close()


async def test_copy_throughput(store: PgStore, moves: PgSlotMoves, shard_dsns: list[str]) -> None:
    """Not an assertion: the rate a copy reaches here, printed (-s shows it)."""
    rows = 200_000
    with psycopg.connect(shard_dsns[0], autocommit=True) as conn:
        conn.execute(
            """INSERT INTO jobs (id, owner_service, type, scheduled_for, run_at, max_attempts,
                                 timeout_seconds, target_kind, target, payload)
               SELECT (lpad(to_hex(g), 12, '0') || '7' || lpad(to_hex(g %% 4096), 3, '0') || '8'
                       || lpad(to_hex(g), 15, '0'))::uuid,
                      'svc', 'BENCH', now(), now() + interval '1 hour', 3, 30, 'HTTP',
                      '{"kind": "HTTP", "url": "https://hooks.example.com/x"}',
                      jsonb_build_object('order', g, 'note', repeat('x', 200))
                 FROM generate_series(1, %s) g""",
            (rows,),
        )
        conn.execute("VACUUM ANALYZE jobs")
    third = list(range(0, 4096, 3))
    await moves.fence_slots(0, third, "moving")
    started = time.perf_counter()
    copied = await moves.copy_slots(0, 1, third)
    seconds = time.perf_counter() - started
    started = time.perf_counter()
    deleted = await moves.delete_slots(0, third)
    cleaned = time.perf_counter() - started
    print(
        f"\ncopy: {copied['jobs']:,} of {rows:,} jobs (a third of the slots) in {seconds:.2f} s: "
        f"{copied['jobs'] / seconds:,.0f} jobs/s; delete: {deleted['jobs'] / cleaned:,.0f} jobs/s"
    )
    assert copied["jobs"] == deleted["jobs"] > rows // 3 - 100


# --- The API ----------------------------------------------------------------------


async def test_the_api_answers_a_fenced_write_503_with_retry_after(
    shard_dsns: list[str], moves: PgSlotMoves
) -> None:
    from tests.integration.test_api import A, body, client_for, settings_for

    slot = shardmap.key_slot("svc-a", "order-7")
    shard = slot % 2
    await moves.fence_slots(shard, [slot], "moving")
    # Every slot of shard 0 is fenced too: keyless creates routed there are
    # refused, and must not fail over to shard 1 (a slot has one owner).
    await moves.fence_slots(0, list(range(0, 4096, 2)), "absent")
    async for api in client_for(settings_for(shard_dsns)):
        keyed = await api.post(
            "/api/v1/jobs", json=body(), headers={**A, "Idempotency-Key": "order-7"}
        )
        assert keyed.status_code == 503 and keyed.headers["Retry-After"] == "1"
        problem = keyed.json()
        assert problem["status"] == 503 and problem["slot"] == slot and problem["shard"] == shard
        assert keyed.headers["content-type"].startswith("application/problem+json")
        # A keyless create routed to a fenced slot takes another slot (a new
        # id: nothing was written under the first), never the same id on
        # another shard: all are made, all on shard 1.
        answers = [
            (await api.post("/api/v1/jobs", json=body(), headers=A)).status_code for _ in range(24)
        ]
        assert set(answers) == {201}
        with psycopg.connect(shard_dsns[1]) as conn:
            made = conn.execute(
                "SELECT count(*) FROM jobs UNION ALL SELECT count(*) FROM jobs_far"
            ).fetchall()
        assert sum(n for (n,) in made) == answers.count(201)
        with psycopg.connect(shard_dsns[0]) as conn:
            none = conn.execute(
                "SELECT count(*) FROM jobs UNION ALL SELECT count(*) FROM jobs_far"
            ).fetchall()
        assert none == [(0,), (0,)]
