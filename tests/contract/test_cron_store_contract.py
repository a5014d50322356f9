"""The cron store contract: every case runs on MemCronStore and PgCronStore.

The same rules the API and the materializer rely on, held against both
implementations so the in-memory one cannot drift: names unique per owner
with idempotent repeats, set-based creates with a result per cron, keyset
pages of due crons, and the compare-and-set that writes a cron's
occurrences only when it wins, once per (cron_id, scheduled_for) ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import shardmap
from cluster.clock import FakeClock
from cluster.errors import Conflict, NotFound
from cluster.model import (
    CancelParams,
    ClaimParams,
    CronRecord,
    CronRunsParams,
    DeleteCronParams,
    DueCountsParams,
    DueCronsParams,
    FinishParams,
    GetCronParams,
    JobResult,
    LastSuccessParams,
    ListCronsParams,
    MaterializeBatchParams,
    MaterializeParams,
    MaterializeResult,
    Occurrence,
    Outcome,
    OwnerCountsParams,
    PauseCronParams,
    PendingParams,
    PruneOccurrencesParams,
    ResumeCronParams,
    RevokeReplacedParams,
    TriggerCronParams,
    WaitingCronsParams,
)
from cluster.store.base import CRON_SOON_SECONDS, CronStore, Store
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from cluster.store.postgres import PgStore
from cluster.store.postgres_cron import PgCronStore
from tests.helpers import cron_record

SHARDS = 2
OWNER = "svc"
FAR = 3600.0


@dataclass
class CronHarness:
    store: Store
    crons: CronStore
    clock: FakeClock
    kind: str

    def now(self) -> datetime:
        return self.clock.now()


@pytest.fixture(params=["mem", pytest.param("pg", marks=pytest.mark.integration)])
async def ch(request: pytest.FixtureRequest) -> AsyncIterator[CronHarness]:
    # The database's now() and this clock agree to within the test's run time.
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    if request.param == "mem":
        mem = MemStore(SHARDS, clock)
        yield CronHarness(mem, MemCronStore(mem), clock, "mem")
        return
    dsns: list[str] = request.getfixturevalue("shard_dsns")
    pg = PgStore(dsns, max_size=4, timeout=3.0)
    await pg.open()
    try:
        yield CronHarness(pg, PgCronStore(pg), clock, "pg")
    finally:
        await pg.close()


def cron(h: CronHarness, name: str = "c", *, at: float = 60.0, **over: Any) -> CronRecord:
    over.setdefault("type", name)
    over.setdefault("payload", {"n": 1})
    return cron_record(OWNER, name, next_fire_at=h.now() + timedelta(seconds=at), **over)


def occ(c: CronRecord, slot: datetime, run_at: datetime | None = None) -> Occurrence:
    return Occurrence(shardmap.new_uuid(shardmap.slot_of(c.id)), slot, run_at or slot, None)


def advance(
    c: CronRecord,
    *occurrences: Occurrence,
    expected: datetime | None = None,
    nxt: datetime | None = None,
    waiting: bool = False,
) -> MaterializeParams:
    """The next_fire_at move of ``c``: an hour on, to ``nxt``, or to NULL
    (``waiting``: a fixed-delay cron waiting for its occurrence)."""
    expected = c.next_fire_at if expected is None else expected
    return MaterializeParams(
        cron_id=c.id,
        expected_next=expected,
        occurrences=occurrences,
        next_fire_at=None if waiting else nxt or (expected or c.anchor) + timedelta(hours=1),
        last_fire=max((o.scheduled_for for o in occurrences), default=None),
    )


async def write(h: CronHarness, *items: MaterializeParams, far: float = FAR) -> MaterializeResult:
    return await h.crons.materialize(0, MaterializeBatchParams(items, now=h.now(), far_horizon_seconds=far))


async def get(h: CronHarness, c: CronRecord) -> CronRecord:
    found = await h.crons.get(0, GetCronParams(c.id, c.owner))
    assert found is not None
    return found


# -- definitions ---------------------------------------------------------------------------------


async def test_create_is_idempotent_by_name_and_fingerprint(ch: CronHarness) -> None:
    c = cron(ch)
    saved, created = await ch.crons.create(0, c)
    assert created and saved.id == c.id and saved.created_at is not None
    again, created = await ch.crons.create(0, dataclasses.replace(c, id=uuid.uuid4()))
    assert not created and again.id == c.id
    with pytest.raises(Conflict):
        await ch.crons.create(0, dataclasses.replace(c, id=uuid.uuid4(), fingerprint="other"))


async def test_create_many_gives_each_cron_its_own_result_in_order(ch: CronHarness) -> None:
    existing = cron(ch, "existing")
    await ch.crons.create(0, existing)
    fresh = [cron(ch, f"new-{i}") for i in range(3)]
    batch = [
        fresh[0],
        dataclasses.replace(existing, id=uuid.uuid4()),  # a repeat: the first one back
        dataclasses.replace(existing, id=uuid.uuid4(), fingerprint="x"),  # a reused name
        fresh[1],
        dataclasses.replace(fresh[1], id=uuid.uuid4()),  # the same name twice in one call
        fresh[2],
    ]
    results = await ch.crons.create_many(0, batch)
    assert len(results) == len(batch)
    kinds = [r if isinstance(r, Conflict) else (r[0].id, r[1]) for r in results]
    assert kinds[0] == (fresh[0].id, True)
    assert kinds[1] == (existing.id, False)
    assert isinstance(kinds[2], Conflict)
    assert kinds[3] == (fresh[1].id, True) and kinds[4] == (fresh[1].id, False)
    assert kinds[5] == (fresh[2].id, True)
    names = [c.name for c in await ch.crons.list_page(0, ListCronsParams(OWNER, "", 50))]
    assert names == ["existing", "new-0", "new-1", "new-2"]


async def test_create_many_of_a_thousand(ch: CronHarness) -> None:
    batch = [cron(ch, f"bulk-{i:04d}") for i in range(1000)]
    results = await ch.crons.create_many(0, batch)
    assert all(not isinstance(r, Conflict) and r[1] for r in results)
    again = await ch.crons.create_many(0, batch)
    assert all(not isinstance(r, Conflict) and not r[1] for r in again)
    assert await ch.crons.create_many(0, []) == []


async def test_crons_by_owner(ch: CronHarness) -> None:
    for name in ("a", "b"):
        await ch.crons.create(0, cron(ch, name))
    other = cron_record("other-svc", "x", next_fire_at=ch.now() + timedelta(seconds=60), payload={})
    await ch.crons.create(0, other)
    assert await ch.crons.crons_by_owner(0, OwnerCountsParams()) == {OWNER: 2, "other-svc": 1}
    assert await ch.crons.crons_by_owner(0, OwnerCountsParams(limit=1)) == {OWNER: 2}


async def test_get_list_update_delete(ch: CronHarness) -> None:
    a, b = cron(ch, "a"), cron(ch, "b")
    for c in (a, b):
        await ch.crons.create(0, c)
    assert await ch.crons.get(0, GetCronParams(a.id, "someone-else")) is None
    page = await ch.crons.list_page(0, ListCronsParams(OWNER, "a", 10))
    assert [c.name for c in page] == ["b"]
    changed = await ch.crons.update(0, dataclasses.replace(a, schedule="30 * * * *", fingerprint="f2"))
    assert changed.schedule == "30 * * * *" and changed.name == "a"
    with pytest.raises(NotFound):
        await ch.crons.update(0, dataclasses.replace(a, id=uuid.uuid4()))
    assert await ch.crons.delete(0, DeleteCronParams(a.id, OWNER)) == 0
    assert await ch.crons.get(0, GetCronParams(a.id, OWNER)) is None
    with pytest.raises(NotFound):
        await ch.crons.delete(0, DeleteCronParams(a.id, OWNER))
    # The name is free again.
    _, created = await ch.crons.create(0, dataclasses.replace(a, id=uuid.uuid4()))
    assert created


async def test_delete_cancels_occurrences_not_started_near_and_far(ch: CronHarness) -> None:
    c = cron(ch, at=-1)
    await ch.crons.create(0, c)
    assert c.next_fire_at is not None
    near = occ(c, c.next_fire_at)
    far = occ(c, c.next_fire_at + timedelta(days=1))
    result = await write(ch, advance(c, near, far))
    assert result.created == 2
    assert (await ch.crons.pending(0, PendingParams((c.id,))))[c.id].pending == 2
    assert await ch.crons.delete(0, DeleteCronParams(c.id, OWNER)) == 2
    runs = await ch.crons.runs(0, CronRunsParams(c.id, 10))
    assert [r.status for r in runs] == ["CANCELLED", "CANCELLED"]


async def test_trigger_once_per_instant_and_forbid_refuses_a_second(ch: CronHarness) -> None:
    c = cron(ch, concurrency="FORBID")
    await ch.crons.create(0, c)
    first = occ(c, ch.now())
    assert await ch.crons.trigger(0, TriggerCronParams(c, first))
    assert not await ch.crons.trigger(0, TriggerCronParams(c, dataclasses.replace(first, job_id=uuid.uuid4())))
    with pytest.raises(Conflict):
        await ch.crons.trigger(0, TriggerCronParams(c, occ(c, ch.now() + timedelta(seconds=1))))
    runs = await ch.crons.runs(0, CronRunsParams(c.id, 10))
    assert [(r.job_id, r.status) for r in runs] == [(first.job_id, "SCHEDULED")]


async def test_replace_revokes_the_other_running_occurrences_and_fences_their_workers(
    ch: CronHarness,
) -> None:
    # The worker's revoke_replaced (claims), on a cron that was REPLACE from
    # the start (the policy an occurrence carries is PgStore's alone).
    c = cron(ch, concurrency="REPLACE")
    await ch.crons.create(0, c)
    old, new = occ(c, ch.now() - timedelta(seconds=20)), occ(c, ch.now() - timedelta(seconds=10))
    for o in (old, new):
        assert await ch.crons.trigger(0, TriggerCronParams(c, o))
    claimed = {j.id: j for j in await ch.store.claim_jobs(0, ClaimParams("w", 10, 30, 0, now=ch.now()))}
    assert claimed.keys() == {old.job_id, new.job_id}
    revoke = RevokeReplacedParams(c.id, new.job_id, now=ch.now())
    assert await ch.store.revoke_replaced(0, revoke) == 1
    assert await ch.store.revoke_replaced(0, revoke) == 0
    runs = {r.job_id: r.status for r in await ch.crons.runs(0, CronRunsParams(c.id, 10))}
    assert runs == {old.job_id: "CANCELLED", new.job_id: "RUNNING"}

    def done(job_id: uuid.UUID) -> FinishParams:
        return FinishParams((JobResult(claimed[job_id].lease, Outcome.SUCCEEDED, "w", ch.now(), 0.0),), now=ch.now())

    assert await ch.store.finish_jobs(0, done(old.job_id)) == set()  # fenced
    assert await ch.store.finish_jobs(0, done(new.job_id)) == {new.job_id}


# -- the materializer's reads --------------------------------------------------------------------


async def test_due_pages_in_keyset_order_inside_one_instant(ch: CronHarness) -> None:
    crons = [cron(ch, f"d{i}", at=10) for i in range(7)] + [cron(ch, "later", at=500)]
    crons.append(cron(ch, "off", at=10, enabled=False))
    await ch.crons.create_many(0, crons)
    until = ch.now() + timedelta(seconds=60)
    seen = []
    after = None
    while True:
        page = await ch.crons.due(0, DueCronsParams(until=until, after=after, limit=3))
        seen += page
        if len(page) < 3:
            break
        last = page[-1]
        assert last.next_fire_at is not None
        after = (last.next_fire_at, last.id)
    assert [c.id for c in seen] == sorted(c.id for c in crons[:7])
    counts = await ch.crons.due_counts(0, DueCountsParams(now=ch.now(), until=ch.now() + timedelta(hours=1)))
    assert [n for _, n in counts] == [7, 1]
    assert counts[0][0] == (ch.now() + timedelta(seconds=10)).replace(microsecond=0)


async def test_overdue_crons_count_in_the_first_second(ch: CronHarness) -> None:
    await ch.crons.create_many(0, [cron(ch, "late1", at=-100), cron(ch, "late2", at=-5)])
    counts = await ch.crons.due_counts(0, DueCountsParams(now=ch.now(), until=ch.now()))
    assert counts == [(ch.now().replace(microsecond=0), 2)]


async def test_database_now_is_the_shards_clock(ch: CronHarness) -> None:
    assert abs((await ch.crons.database_now(0) - ch.now()).total_seconds()) < 30


# -- the compare-and-set write -------------------------------------------------------------------


async def test_materialize_writes_only_for_crons_whose_cas_won(ch: CronHarness) -> None:
    won, lost = cron(ch, "won", at=-1), cron(ch, "lost", at=-1)
    await ch.crons.create_many(0, [won, lost])
    assert won.next_fire_at is not None and lost.next_fire_at is not None
    stale = lost.next_fire_at - timedelta(hours=1)
    result = await write(
        ch,
        advance(won, occ(won, won.next_fire_at)),
        advance(lost, occ(lost, lost.next_fire_at), expected=stale),
    )
    assert result.advanced == frozenset({won.id}) and result.created == 1
    assert (await get(ch, won)).next_fire_at == won.next_fire_at + timedelta(hours=1)
    assert (await get(ch, won)).last_fire_at == won.next_fire_at
    assert (await get(ch, lost)).next_fire_at == lost.next_fire_at
    assert await ch.crons.runs(0, CronRunsParams(lost.id, 10)) == []
    assert len(await ch.crons.runs(0, CronRunsParams(won.id, 10))) == 1


async def test_a_cron_disabled_since_it_was_read_loses_the_cas(ch: CronHarness) -> None:
    c = cron(ch, at=-1)
    await ch.crons.create(0, c)
    assert c.next_fire_at is not None
    await ch.crons.update(0, dataclasses.replace(c, enabled=False))
    result = await write(ch, advance(c, occ(c, c.next_fire_at)))
    assert result.advanced == frozenset() and result.created == 0
    assert await ch.crons.runs(0, CronRunsParams(c.id, 10)) == []


async def test_a_slot_is_never_written_twice(ch: CronHarness) -> None:
    c = cron(ch, at=-1)
    await ch.crons.create(0, c)
    assert c.next_fire_at is not None
    slot = c.next_fire_at
    assert (await write(ch, advance(c, occ(c, slot)))).created == 1
    # Moved back (a PATCH, another materializer's stale plan): the CAS wins,
    # the ledger still refuses the slot.
    moved = await get(ch, c)
    again = await write(ch, advance(moved, occ(c, slot), nxt=slot + timedelta(hours=2)))
    assert again.advanced == frozenset({c.id}) and again.created == 0
    assert len(await ch.crons.runs(0, CronRunsParams(c.id, 10))) == 1


async def test_the_janitor_prunes_ledger_rows_of_done_slots_past_the_retention(ch: CronHarness) -> None:
    done, held = cron(ch, "done", at=-1), cron(ch, "held", at=-1)
    await ch.crons.create_many(0, [done, held])
    assert done.next_fire_at is not None and held.next_fire_at is not None
    slots = [done.next_fire_at - timedelta(minutes=1), done.next_fire_at]
    # Two slots of one cron that ran, one of another still pending (far:
    # it runs in three hours), and a slot of two days ago made just now,
    # as a backfill makes one.
    pending = occ(held, held.next_fire_at, run_at=ch.now() + timedelta(hours=3))
    assert (await write(ch, advance(done, *(occ(done, at) for at in slots)), advance(held, pending))).created == 3
    recent = occ(done, ch.now() - timedelta(days=2))
    assert await ch.crons.trigger(0, TriggerCronParams(done, recent))
    claimed = await ch.store.claim_jobs(0, ClaimParams("w", 10, 30, 0, now=ch.now()))
    assert len(claimed) == 3
    results = tuple(JobResult(j.lease, Outcome.SUCCEEDED, "w", ch.now(), 0.0) for j in claimed)
    await ch.store.finish_jobs(0, FinishParams(results, now=ch.now()))

    # A day ago: the backfilled slot is older, but its row was made since.
    day_ago = PruneOccurrencesParams(before=ch.now() - timedelta(days=1))
    assert await ch.crons.prune_occurrences(0, day_ago) == 0
    # Tomorrow: the two slots that ran go, a batch at a time; the pending
    # job keeps its row.
    tomorrow = ch.now() + timedelta(days=1)
    assert await ch.crons.prune_occurrences(0, PruneOccurrencesParams(tomorrow, limit=2)) == 2
    assert await ch.crons.prune_occurrences(0, PruneOccurrencesParams(tomorrow, limit=2)) == 1
    assert await ch.crons.prune_occurrences(0, PruneOccurrencesParams(tomorrow)) == 0
    # The rows are gone: a slot once made could be made again (which is
    # why no backfill reaches past the retention).
    moved = await get(ch, done)
    again = await write(ch, advance(moved, occ(done, slots[0]), nxt=slots[0] + timedelta(hours=2)))
    assert again.created == 1
    stale = await get(ch, held)
    assert (await write(ch, advance(stale, occ(held, held.next_fire_at)))).created == 0


async def test_counts_missed_and_skipped(ch: CronHarness) -> None:
    c = cron(ch, at=-1)
    await ch.crons.create(0, c)
    item = dataclasses.replace(advance(c), missed=3, skipped=2)
    await write(ch, item)
    saved = await get(ch, c)
    assert (saved.missed_count, saved.skipped_count) == (3, 2)


async def test_occurrences_beyond_the_far_horizon_go_far(ch: CronHarness) -> None:
    allow, forbid = cron(ch, "allow", at=-1), cron(ch, "forbid", at=-1, concurrency="FORBID")
    await ch.crons.create_many(0, [allow, forbid])
    assert allow.next_fire_at is not None and forbid.next_fire_at is not None
    later = ch.now() + timedelta(hours=3)
    a = occ(allow, allow.next_fire_at, run_at=later)
    f = occ(forbid, forbid.next_fire_at, run_at=later)
    assert (await write(ch, advance(allow, a), advance(forbid, f))).created == 2
    # Far jobs are not claimable; FORBID ones stay near (the index reads the hot table).
    claimed = await ch.store.claim_jobs(
        0, ClaimParams("w", 10, 30, 0, prefetch_seconds=4 * 3600, now=ch.now())
    )
    assert [j.id for j in claimed] == [f.job_id]
    pending = await ch.crons.pending(0, PendingParams((allow.id, forbid.id)))
    assert pending[allow.id].pending == 1 and pending[forbid.id].pending == 1


async def test_forbid_refuses_a_second_pending_occurrence(ch: CronHarness) -> None:
    c = cron(ch, at=-1, concurrency="FORBID")
    await ch.crons.create(0, c)
    assert c.next_fire_at is not None
    assert await ch.crons.trigger(0, TriggerCronParams(c, occ(c, ch.now() - timedelta(seconds=5))))
    result = await write(ch, advance(c, occ(c, c.next_fire_at)))
    assert result.advanced == frozenset({c.id}) and result.created == 0
    assert result.refused == (c.id,)


async def test_pending_and_last_success_follow_the_occurrence(ch: CronHarness) -> None:
    c = cron(ch, at=-1, schedule="every 5m fixed-delay", schedule_kind="FIXED_DELAY")
    await ch.crons.create(0, c)
    assert c.next_fire_at is not None
    await write(ch, advance(c, occ(c, c.next_fire_at), waiting=True))
    waiting = await ch.crons.waiting_fixed_delay(0, WaitingCronsParams())
    assert [w.id for w in waiting] == [c.id]
    info = await ch.crons.pending(0, PendingParams((c.id,), with_finished=True))
    assert info[c.id].pending == 1 and info[c.id].last_finished is None
    [job] = await ch.store.claim_jobs(0, ClaimParams("w", 10, 30, 0, now=ch.now()))
    done = JobResult(job.lease, Outcome.SUCCEEDED, "w", ch.now(), 0.0)
    assert await ch.store.finish_jobs(0, FinishParams((done,), now=ch.now())) == {job.id}
    info = await ch.crons.pending(0, PendingParams((c.id,), with_finished=True))
    assert info[c.id].pending == 0 and info[c.id].last_finished is not None
    assert (await get(ch, c)).last_success_at is not None
    assert c.id in dict(await ch.crons.last_successes(0, LastSuccessParams()))
    runs = await ch.crons.runs(0, CronRunsParams(c.id, 10))
    assert [r.status for r in runs] == ["SUCCEEDED"]


async def test_a_success_shows_before_and_after_it_is_folded(ch: CronHarness) -> None:
    # Completions do not stamp the cron (PostgreSQL folds the history into
    # it later): a read shows the success at once, and still after the fold.
    c = cron(ch, at=-1)
    await ch.crons.create(0, c)
    assert c.next_fire_at is not None
    await write(ch, advance(c, occ(c, c.next_fire_at)))
    [job] = await ch.store.claim_jobs(0, ClaimParams("w", 10, 30, 0, now=ch.now()))
    finished = ch.now()
    done = JobResult(job.lease, Outcome.SUCCEEDED, "w", finished, 0.0)
    assert await ch.store.finish_jobs(0, FinishParams((done,), now=finished)) == {job.id}
    assert (await get(ch, c)).last_success_at == finished
    ch.clock.advance(1)
    folded = dict(await ch.crons.last_successes(0, LastSuccessParams(fold_lag_seconds=0)))
    assert folded[c.id] == finished
    assert (await get(ch, c)).last_success_at == finished
    # A second fold over the same history changes nothing.
    assert dict(await ch.crons.last_successes(0, LastSuccessParams(fold_lag_seconds=0)))[c.id] == finished


async def test_a_fold_in_small_slices_folds_every_success(ch: CronHarness) -> None:
    # One history row a slice (a slice takes the rows up to the next one)
    # and no time budget: each call folds one slice, and a few calls fold
    # the three successes. (PostgreSQL's slices are windows of time too,
    # narrowed after a full one: a call may find an empty window.)
    crons = [cron(ch, f"sliced-{i}", at=-1) for i in range(3)]
    for c in crons:
        await ch.crons.create(0, c)
        assert c.next_fire_at is not None
        await write(ch, advance(c, occ(c, c.next_fire_at)))
    finished = {}
    claimed = await ch.store.claim_jobs(0, ClaimParams("w", 10, 30, 0, now=ch.now()))
    for i, job in enumerate(claimed):
        # Distinct instants, in the past of the database's clock, which
        # bounds what a fold with no lag may take.
        at = ch.now() - timedelta(seconds=10 - i)
        done = JobResult(job.lease, Outcome.SUCCEEDED, "w", at, 0.0)
        assert await ch.store.finish_jobs(0, FinishParams((done,), now=at)) == {job.id}
        assert job.cron_id is not None
        finished[job.cron_id] = at
    sliced = LastSuccessParams(fold_lag_seconds=0, fold_limit=1, fold_budget_seconds=0)
    for _ in range(10):
        folded = dict(await ch.crons.last_successes(0, sliced))
        if {c.id: folded[c.id] for c in crons} == finished:
            break
    assert {c.id: folded[c.id] for c in crons} == finished


async def test_the_last_result_is_the_occurrence_that_finished_last_before_and_after_the_fold(
    ch: CronHarness,
) -> None:
    c = cron(ch, at=-1)
    await ch.crons.create(0, c)
    assert c.next_fire_at is not None and (await get(ch, c)).last_result is None
    early, late = c.next_fire_at - timedelta(minutes=2), c.next_fire_at
    await write(ch, advance(c, occ(c, early), occ(c, late)))
    claimed = await ch.store.claim_jobs(0, ClaimParams("w", 10, 30, 0, now=ch.now()))
    by_slot = {j.scheduled_for: j for j in claimed}
    # The earlier slot succeeds, then the later one fails for good: the
    # last result is the failure, the last success stays the success.
    succeeded, failed = ch.now() - timedelta(seconds=10), ch.now() - timedelta(seconds=5)
    for slot, outcome, at in ((early, Outcome.SUCCEEDED, succeeded), (late, Outcome.FAILED, failed)):
        done = JobResult(by_slot[slot].lease, outcome, "w", at, 0.0, "HTTP 500")
        assert await ch.store.finish_jobs(0, FinishParams((done,), now=at))

    async def shown() -> list[tuple[str | None, datetime | None, datetime | None]]:
        listed = await ch.crons.list_page(0, ListCronsParams(OWNER, "", 10))
        return [
            (x.last_result, x.last_result_at, x.last_success_at) for x in [await get(ch, c), *listed]
        ]

    assert await shown() == [("FAILED", failed, succeeded)] * 2
    ch.clock.advance(1)
    await ch.crons.last_successes(0, LastSuccessParams(fold_lag_seconds=0))
    assert await shown() == [("FAILED", failed, succeeded)] * 2
    # The PostgreSQL fold (lag 0) reached the database's now(), which the
    # test clock may trail by the test's run time so far: a finish written
    # at the test clock's now would then be behind the fold, where a real
    # one (stamped with the database's now()) never is. On past it.
    ch.clock.set(max(ch.now(), datetime.now(UTC)) + timedelta(seconds=1))
    # A skipped occurrence after the fold is a result too; a cancelled one is not.
    skipped_slot, cancelled_slot = late + timedelta(hours=1), late + timedelta(hours=2)
    await write(
        ch, advance(c, occ(c, skipped_slot, ch.now() - timedelta(seconds=1)), expected=late + timedelta(hours=1))
    )
    [job] = await ch.store.claim_jobs(0, ClaimParams("w", 10, 30, 0, now=ch.now()))
    skipped = ch.now()
    done = JobResult(job.lease, Outcome.SKIPPED, "w", skipped, 0.0, "starting deadline passed")
    assert await ch.store.finish_jobs(0, FinishParams((done,), now=skipped))
    cancelled = occ(c, cancelled_slot)
    await write(ch, advance(c, cancelled, expected=late + timedelta(hours=2)))
    ch.clock.advance(1)
    await ch.store.cancel_job(0, CancelParams(cancelled.job_id, OWNER, now=ch.now()))
    assert await shown() == [("SKIPPED", skipped, succeeded)] * 2


async def test_disabled_crons_leave_the_silent_cron_list(ch: CronHarness) -> None:
    on, off = cron(ch, "on"), cron(ch, "off", enabled=False)
    await ch.crons.create_many(0, [on, off])
    ids = dict(await ch.crons.last_successes(0, LastSuccessParams()))
    assert on.id in ids and off.id not in ids


async def test_the_oldest_last_successes_first(ch: CronHarness) -> None:
    old, new = cron(ch, "old"), cron(ch, "new")
    await ch.crons.create(0, old)
    ch.clock.advance(5)
    await ch.crons.create(0, new)
    ids = [i for i, _ in await ch.crons.last_successes(0, LastSuccessParams(limit=1))]
    assert ids == [old.id]


def test_both_implementations_satisfy_the_protocol() -> None:
    # mypy checks these assignments against CronStore.
    mem = MemStore(1)
    checked: list[CronStore] = [MemCronStore(mem), PgCronStore(PgStore(["postgresql://unused"]))]
    assert len(checked) == 2


# -- wake-ups ------------------------------------------------------------------------------------


class Heard:
    """Wake-ups of a listener, taken as they come (as the leader loop does)."""

    def __init__(self, wakes: AsyncGenerator[None, None]) -> None:
        self.wakes = wakes
        self.came = asyncio.Event()
        self.task = asyncio.create_task(self._take())

    async def _take(self) -> None:
        async for _ in self.wakes:
            self.came.set()

    async def woken(self, seconds: float) -> bool:
        """Whether a wake-up came (since the last call) within ``seconds``."""
        try:
            await asyncio.wait_for(self.came.wait(), seconds)
        except TimeoutError:
            return False
        self.came.clear()
        return True

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.wakes.aclose()


async def test_a_cron_written_due_within_a_minute_wakes_its_shards_listener(ch: CronHarness) -> None:
    quiet = 0.5  # how long "no wake-up" is watched for
    wakes = Heard(ch.crons.cron_soon(0))
    try:
        assert await wakes.woken(5)  # listening began
        later = cron(ch, "later", at=2 * CRON_SOON_SECONDS)
        await ch.crons.create(0, later)
        await ch.crons.create(1, cron(ch, "other-shard", at=10))
        assert not await wakes.woken(quiet)
        soon = cron(ch, "soon", at=10)
        await ch.crons.create(0, soon)
        assert await wakes.woken(5)
        # The materializer's own writes keep the cron due soon and wake no one.
        await write(ch, advance(soon, nxt=ch.now() + timedelta(seconds=20)))
        assert not await wakes.woken(quiet)
        # Paused: nothing is due. Resumed: due soon again.
        await ch.crons.pause(0, PauseCronParams(soon.id, OWNER, "maintenance"))
        assert not await wakes.woken(quiet)
        await ch.crons.resume(0, ResumeCronParams(soon.id, OWNER))
        assert await wakes.woken(5)
        # A change that brings a cron's next fire within the minute.
        moved = dataclasses.replace(await get(ch, later), next_fire_at=ch.now() + timedelta(seconds=5))
        await ch.crons.update(0, moved)
        assert await wakes.woken(5)
        # A batch of soon crons is one wake-up, or a few; never none.
        batch = [cron(ch, f"b{i}", at=10) for i in range(50)]
        assert all(not isinstance(r, Conflict) for r in await ch.crons.create_many(0, batch))
        assert await wakes.woken(5)
    finally:
        await wakes.close()
