"""The operators' store operations, on the in-memory stores and PostgreSQL:
job search (owner, filters, keyset pages over the near, far and history
tables), retry (same id, a new attempt series, old attempts fenced), pause
and resume of jobs and crons, and backfill (each slot once)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

import shardmap
from cluster.errors import Conflict, NotFound
from cluster.model import (
    BackfillParams,
    CancelParams,
    ClaimParams,
    DueCronsParams,
    FinishParams,
    GetJobParams,
    JobRecord,
    JobResult,
    JobSearchParams,
    JobStatus,
    LatenessParams,
    MoveFarParams,
    Outcome,
    PauseCronParams,
    PauseJobParams,
    ReapParams,
    ResumeCronParams,
    ResumeJobParams,
    RetryJobParams,
)
from tests.contract import test_cron_store_contract as cron_contract
from tests.contract.conftest import Harness
from tests.contract.test_cron_store_contract import CronHarness, advance, cron, get, occ, write
from tests.contract.test_store_contract import SHARD, claim, create, job, result

OWNER = "svc"
# The cron store harness (mem and pg) of the cron contract suite.
ch = cron_contract.ch


async def search(h: Harness | CronHarness, **kw: object) -> list[JobRecord]:
    kw.setdefault("owner", OWNER)
    return await h.store.search_jobs(SHARD, JobSearchParams(**kw))  # type: ignore[arg-type]


async def fail_for_good(h: Harness, p_id: uuid.UUID, error: str = "HTTP 500") -> None:
    """Claim ``p_id`` (the only due job) and record a permanent failure."""
    [c] = [c for c in await h.store.claim_jobs(SHARD, claim(h)) if c.id == p_id]
    assert await h.store.finish_jobs(
        SHARD, FinishParams((result(h, c, Outcome.FAILED, error=error),), now=h.now())
    )


# -- search ----------------------------------------------------------------------------


async def test_search_reads_near_far_and_history_newest_first_for_the_owner(h: Harness) -> None:
    done = await create(h)
    await fail_for_good(h, done.id)
    near = await create(h, run_at=h.now() + timedelta(minutes=5))
    far = await create(h, run_at=h.now() + timedelta(days=3), far=True)
    await create(h, owner="other")
    found = await search(h)
    # Newest first by id: a UUIDv7 orders by its millisecond, then by bits
    # that are not a sequence, so jobs of one millisecond have some order.
    assert [j.id for j in found] == sorted([far.id, near.id, done.id], reverse=True)
    by_id = {j.id: j for j in found}
    assert by_id[far.id].status is by_id[near.id].status is JobStatus.SCHEDULED
    assert by_id[done.id].status is JobStatus.FAILED
    assert by_id[done.id].last_error == "HTTP 500" and by_id[done.id].finished_at is not None
    assert len(await search(h, owner="other")) == 1


async def test_search_filters(h: Harness) -> None:
    failed = await create(h)
    await fail_for_good(h, failed.id)
    cancelled = await create(h, run_at=h.now() + timedelta(hours=1))
    await h.store.cancel_job(SHARD, CancelParams(cancelled.id, OWNER))
    waiting = await create(h, run_at=h.now() + timedelta(hours=2))
    assert [j.id for j in await search(h, statuses=(JobStatus.FAILED,))] == [failed.id]
    both = await search(h, statuses=(JobStatus.FAILED, JobStatus.CANCELLED))
    assert {j.id for j in both} == {failed.id, cancelled.id}
    assert [j.id for j in await search(h, type="NOPE")] == []
    assert len(await search(h, type="TEST")) == 3
    later = await search(h, run_at_from=h.now() + timedelta(minutes=30))
    assert {j.id for j in later} == {cancelled.id, waiting.id}
    early = await search(h, run_at_to=h.now() + timedelta(minutes=30))
    assert [j.id for j in early] == [failed.id]
    finished = await search(h, finished_from=h.now() - timedelta(minutes=1))
    assert {j.id for j in finished} == {failed.id, cancelled.id}
    assert await search(h, finished_to=h.now() - timedelta(minutes=1)) == []


async def test_search_by_run_at_finds_jobs_finished_long_after_and_cancelled_long_before(
    h: Harness,
) -> None:
    # The store bounds the history's finish by a runAt bound (all but
    # CANCELLED rows): a job that ran late, and one cancelled days before
    # its runAt, are still found by their runAt.
    ran = await create(h, run_at=h.now() - timedelta(hours=5))
    await fail_for_good(h, ran.id)
    cancelled = await create(h, run_at=h.now() + timedelta(days=3), far=True)
    await h.store.cancel_job(SHARD, CancelParams(cancelled.id, OWNER, now=h.now()))
    found = await search(h, run_at_from=h.now() - timedelta(hours=6))
    assert {j.id for j in found} == {ran.id, cancelled.id}
    assert [j.id for j in await search(h, run_at_from=h.now() - timedelta(hours=4))] == [cancelled.id]
    later = await search(h, run_at_from=h.now() + timedelta(days=2), statuses=(JobStatus.CANCELLED,))
    assert [j.id for j in later] == [cancelled.id]
    assert [j.id for j in await search(h, run_at_from=h.now() + timedelta(days=2))] == [cancelled.id]
    failed = await search(h, run_at_from=h.now() - timedelta(hours=6), statuses=(JobStatus.FAILED,))
    assert [j.id for j in failed] == [ran.id]


async def test_search_by_cron_and_with_attempts(h: Harness) -> None:
    cron_id = uuid.uuid4()
    mine = await create(h, cron_id=cron_id)
    await create(h)
    await fail_for_good(h, mine.id, "boom")
    [found] = await search(h, cron_id=cron_id, with_attempts=True)
    assert found.id == mine.id
    assert [(a.attempt, a.outcome, a.error) for a in found.attempts] == [(1, "ERROR", "boom")]


async def test_search_by_cron_reads_its_rows_in_every_table_with_the_other_filters(h: Harness) -> None:
    cron_id = uuid.uuid4()
    failed = await create(h, cron_id=cron_id)
    await fail_for_good(h, failed.id)
    near = await create(h, cron_id=cron_id, run_at=h.now() + timedelta(minutes=5))
    far = await create(h, cron_id=cron_id, run_at=h.now() + timedelta(days=3), far=True)
    await create(h, cron_id=uuid.uuid4())
    await create(h, cron_id=cron_id, owner="other")
    found = await search(h, cron_id=cron_id)
    assert [j.id for j in found] == sorted([failed.id, near.id, far.id], reverse=True)
    dead = await search(h, cron_id=cron_id, statuses=(JobStatus.FAILED,))
    assert [j.id for j in dead] == [failed.id]
    both = await search(h, cron_id=cron_id, statuses=(JobStatus.FAILED, JobStatus.SCHEDULED))
    assert [j.id for j in both] == [j.id for j in found]
    assert [j.id for j in await search(h, cron_id=cron_id, limit=1, before=found[0].id)] == [found[1].id]
    assert await search(h, cron_id=cron_id, type="NOPE") == []
    later = await search(h, cron_id=cron_id, run_at_from=h.now() + timedelta(minutes=1))
    assert {j.id for j in later} == {near.id, far.id}
    assert [j.id for j in await search(h, cron_id=cron_id, finished_from=h.now() - timedelta(minutes=1))] == [
        failed.id
    ]


async def test_search_pages_by_keyset_without_gaps_or_repeats(h: Harness) -> None:
    made = {(await create(h, run_at=h.now() + timedelta(minutes=i))).id for i in range(7)}
    seen: list[uuid.UUID] = []
    before = None
    while True:
        page = await search(h, limit=3, before=before)
        seen += [j.id for j in page]
        if len(page) < 3:
            break
        before = page[-1].id
    assert seen == sorted(made, reverse=True)


# -- retry -----------------------------------------------------------------------------


async def test_retry_keeps_the_id_and_fences_the_old_attempt(h: Harness) -> None:
    p = await create(h, max_attempts=1)
    [c] = await h.store.claim_jobs(SHARD, claim(h, lease=5))
    reaped = await h.store.reap_expired(SHARD, ReapParams(now=h.now() + timedelta(seconds=60)))
    assert (reaped.failed, reaped.failed_by) == (1, ((OWNER, "HTTP", 1),))  # a dead letter, by owner
    dead = await h.store.get_job(SHARD, GetJobParams(p.id, OWNER))
    assert dead is not None and dead.status is JobStatus.FAILED and dead.attempt == 1

    later = h.now() + timedelta(seconds=61)
    revived = await h.store.retry_job(SHARD, RetryJobParams(p.id, OWNER, now=later))
    assert (revived.id, revived.scheduled_for, revived.status) == (p.id, p.scheduled_for, JobStatus.SCHEDULED)
    assert (revived.attempt, revived.max_attempts) == (1, 2)  # a new series of one attempt
    # The worker of attempt 1 wakes up: its write matches nothing.
    assert await h.store.finish_jobs(SHARD, FinishParams((result(h, c),), now=h.now())) == set()
    [again] = await h.store.claim_jobs(SHARD, claim(h, at=62))
    assert (again.id, again.attempt, again.scheduled_for) == (p.id, 2, p.scheduled_for)
    done = FinishParams((result(h, again),), now=later + timedelta(seconds=2))
    assert await h.store.finish_jobs(SHARD, done) == {p.id}
    logged = await h.store.get_job(SHARD, GetJobParams(p.id, OWNER))
    assert logged is not None and logged.status is JobStatus.SUCCEEDED
    assert [a.outcome for a in logged.attempts] == ["LEASE_EXPIRED", "RETRIED", "SUCCEEDED"]


async def test_a_second_retry_gets_a_series_of_the_same_size(h: Harness) -> None:
    p = await create(h, max_attempts=2)
    await fail_for_good(h, p.id)

    def soon() -> datetime:
        h.clock.advance(1)
        return h.now()

    first = await h.store.retry_job(SHARD, RetryJobParams(p.id, OWNER, now=soon()))
    assert (first.attempt, first.max_attempts) == (1, 3)
    soon()
    await fail_for_good(h, p.id)
    second = await h.store.retry_job(SHARD, RetryJobParams(p.id, OWNER, now=soon()))
    assert (second.attempt, second.max_attempts) == (2, 4)
    sized = await h.store.cancel_job(SHARD, CancelParams(p.id, OWNER, now=soon()))
    assert sized.status is JobStatus.CANCELLED
    third = await h.store.retry_job(SHARD, RetryJobParams(p.id, OWNER, max_attempts=5, now=soon()))
    assert third.max_attempts == 7


async def test_retry_refuses_what_is_not_finished_failed_or_cancelled(h: Harness) -> None:
    waiting = await create(h, run_at=h.now() + timedelta(hours=1))
    with pytest.raises(Conflict):
        await h.store.retry_job(SHARD, RetryJobParams(waiting.id, OWNER))
    ok = await create(h)
    [c] = await h.store.claim_jobs(SHARD, claim(h))
    await h.store.finish_jobs(SHARD, FinishParams((result(h, c),), now=h.now()))
    with pytest.raises(Conflict):
        await h.store.retry_job(SHARD, RetryJobParams(ok.id, OWNER))
    with pytest.raises(NotFound):
        await h.store.retry_job(SHARD, RetryJobParams(ok.id, "other"))
    with pytest.raises(NotFound):
        await h.store.retry_job(SHARD, RetryJobParams(shardmap.new_uuid(), OWNER))
    rerun = await h.store.retry_job(
        SHARD, RetryJobParams(ok.id, OWNER, statuses=frozenset({JobStatus.SUCCEEDED}))
    )
    assert rerun.status is JobStatus.SCHEDULED


# -- pause and resume a job --------------------------------------------------------------


async def test_a_paused_job_is_not_claimed_until_resumed(h: Harness) -> None:
    p = await create(h)
    paused = await h.store.pause_job(SHARD, PauseJobParams(p.id, OWNER, "vendor outage", now=h.now()))
    assert paused.status is JobStatus.SCHEDULED and paused.paused_at is not None
    assert paused.pause_reason == "vendor outage"
    again = await h.store.pause_job(SHARD, PauseJobParams(p.id, OWNER, "twice"))
    assert again.pause_reason == "vendor outage"  # idempotent
    assert await h.store.claim_jobs(SHARD, claim(h, at=5)) == []
    assert await h.store.move_far_jobs(SHARD, MoveFarParams(3600, now=h.now())) == 0
    [found] = await search(h)
    assert found.paused_at is not None
    resumed = await h.store.resume_job(SHARD, ResumeJobParams(p.id, OWNER, now=h.now()))
    assert resumed.paused_at is None and resumed.pause_reason is None
    [c] = await h.store.claim_jobs(SHARD, claim(h, at=5))
    assert c.id == p.id
    with pytest.raises(Conflict):
        await h.store.pause_job(SHARD, PauseJobParams(p.id, OWNER, "too late"))


async def test_a_paused_far_job_stays_far_and_can_be_cancelled(h: Harness) -> None:
    p = await create(h, run_at=h.now() + timedelta(days=2), far=True)
    await h.store.pause_job(SHARD, PauseJobParams(p.id, OWNER, "hold"))
    assert await h.store.move_far_jobs(SHARD, MoveFarParams(10 * 86400, now=h.now())) == 0
    cancelled = await h.store.cancel_job(SHARD, CancelParams(p.id, OWNER, now=h.now()))
    assert cancelled.status is JobStatus.CANCELLED and cancelled.paused_at is None


async def test_pause_refuses_cron_occurrences_and_other_owners(h: Harness) -> None:
    occurrence = await create(h, cron_id=uuid.uuid4())
    with pytest.raises(Conflict):
        await h.store.pause_job(SHARD, PauseJobParams(occurrence.id, OWNER, "x"))
    with pytest.raises(NotFound):
        await h.store.pause_job(SHARD, PauseJobParams(occurrence.id, "other", "x"))


# -- pause and resume a cron; backfill -----------------------------------------------------


async def test_pause_withdraws_slots_not_yet_due_and_stops_materializing(ch: CronHarness) -> None:
    c = cron(ch, at=60)
    await ch.crons.create(0, c)
    slot = c.next_fire_at
    assert slot is not None
    assert (await write(ch, advance(c, occ(c, slot)))).created == 1
    paused = await ch.crons.pause(0, PauseCronParams(c.id, OWNER, "maintenance", now=ch.now()))
    assert paused.paused_at is not None and paused.pause_reason == "maintenance"
    assert paused.next_fire_at == slot  # back to the withdrawn slot
    assert await search(ch, cron_id=c.id) == []
    until = ch.now() + timedelta(days=1)
    assert await ch.crons.due(0, DueCronsParams(until=until)) == []
    lost = await write(ch, advance(paused, occ(c, slot)))
    assert lost.advanced == frozenset() and lost.created == 0
    resumed = await ch.crons.resume(0, ResumeCronParams(c.id, OWNER))
    assert resumed.paused_at is None and resumed.next_fire_at == slot
    assert [d.id for d in await ch.crons.due(0, DueCronsParams(until=until))] == [c.id]
    # The withdrawn slot can be written again: it was never run.
    assert (await write(ch, advance(resumed, occ(c, slot)))).created == 1
    with pytest.raises(NotFound):
        await ch.crons.pause(0, PauseCronParams(c.id, "other", "x"))


async def test_a_patch_keeps_the_pause(ch: CronHarness) -> None:
    c = cron(ch)
    await ch.crons.create(0, c)
    await ch.crons.pause(0, PauseCronParams(c.id, OWNER, "hold"))
    saved = await ch.crons.update(0, (await get(ch, c)))
    assert saved.paused_at is not None and saved.pause_reason == "hold"


def _backfill(c_id: uuid.UUID, slots: list[datetime], now: datetime, **kw: bool) -> BackfillParams:
    slot = shardmap.slot_of(c_id)
    return BackfillParams(
        c_id, OWNER, tuple(slots), tuple(shardmap.new_uuid(slot) for _ in slots), now, **kw
    )


async def test_backfill_writes_each_slot_once(ch: CronHarness) -> None:
    c = cron(ch)
    await ch.crons.create(0, c)
    slots = [ch.now() - timedelta(hours=h) for h in (3, 2, 1)]
    dry = await ch.crons.backfill(0, _backfill(c.id, slots, ch.now(), dry_run=True))
    assert [s.outcome for s in dry.slots] == ["created"] * 3
    assert await search(ch, cron_id=c.id) == []
    first = await ch.crons.backfill(0, _backfill(c.id, slots, ch.now()))
    assert [s.outcome for s in first.slots] == ["created"] * 3
    again = await ch.crons.backfill(0, _backfill(c.id, slots, ch.now()))
    assert [s.outcome for s in again.slots] == ["exists"] * 3
    assert [s.job_id for s in again.slots] == [s.job_id for s in first.slots]
    assert [s.status for s in again.slots] == [JobStatus.SCHEDULED] * 3
    jobs = await search(ch, cron_id=c.id)
    assert sorted(j.scheduled_for for j in jobs) == slots
    with pytest.raises(NotFound):
        await ch.crons.backfill(0, BackfillParams(c.id, "other", (), (), ch.now()))


async def test_backfill_rerun_revives_a_finished_slot(ch: CronHarness) -> None:
    c = cron(ch)
    await ch.crons.create(0, c)
    slot = ch.now() - timedelta(hours=1)
    [made] = (await ch.crons.backfill(0, _backfill(c.id, [slot], ch.now()))).slots
    claims = ClaimParams("w1", 10, 30, 0, now=ch.now() + timedelta(seconds=1))
    [claimed] = await ch.store.claim_jobs(0, claims)
    ok = JobResult(claimed.lease, Outcome.SUCCEEDED, "w1", ch.now(), 0.0)
    await ch.store.finish_jobs(0, FinishParams((ok,), now=ch.now()))
    [kept] = (await ch.crons.backfill(0, _backfill(c.id, [slot], ch.now()))).slots
    assert (kept.outcome, kept.status) == ("exists", JobStatus.SUCCEEDED)
    [rerun] = (await ch.crons.backfill(0, _backfill(c.id, [slot], ch.now(), rerun=True))).slots
    assert (rerun.outcome, rerun.job_id) == ("rerun", made.job_id)
    [job] = await search(ch, cron_id=c.id)
    assert (job.id, job.status, job.scheduled_for) == (made.job_id, JobStatus.SCHEDULED, slot)


# -- start lateness --------------------------------------------------------------------


async def test_start_lateness_by_minute_of_the_attempts_that_ended(h: Harness) -> None:
    minute = h.now().astimezone(UTC).replace(second=0, microsecond=0)
    # (lateness, when the attempt ended, how): four attempts in the minute
    # (a retry's too), two in the one before (one started early: 0), one
    # before the window; one attempt of another shard is not this shard's.
    ends = [
        (0.1, minute + timedelta(seconds=10), Outcome.SUCCEEDED),
        (0.2, minute + timedelta(seconds=11), Outcome.FAILED),
        (0.4, minute + timedelta(seconds=12), Outcome.RETRY),
        (3.0, minute + timedelta(seconds=13), Outcome.SUCCEEDED),
        (1.0, minute - timedelta(seconds=50), Outcome.SUCCEEDED),
        (-0.5, minute - timedelta(seconds=40), Outcome.SUCCEEDED),
        (50.0, minute - timedelta(minutes=20), Outcome.SUCCEEDED),
    ]
    for _ in ends:
        await create(h)
    claimed = await h.store.claim_jobs(SHARD, claim(h))
    assert len(claimed) == len(ends)
    for c, (late, at, outcome) in zip(claimed, ends, strict=True):
        error = None if outcome is Outcome.SUCCEEDED else "HTTP 500"
        done = JobResult(c.lease, outcome, "w1", at, late, error, 5.0)
        assert await h.store.finish_jobs(SHARD, FinishParams((done,), now=at))
    await h.store.create_job(1, job(h))
    [c1] = await h.store.claim_jobs(1, claim(h))
    done = JobResult(c1.lease, Outcome.SUCCEEDED, "w1", minute, 9.0)
    assert await h.store.finish_jobs(1, FinishParams((done,), now=minute + timedelta(seconds=1)))

    now = minute + timedelta(seconds=30)
    series = await h.store.start_lateness(SHARD, LatenessParams(minutes=15, now=now))
    assert [m.minute for m in series] == [minute - timedelta(minutes=1), minute]
    before, this = series
    assert (before.count, before.p50_seconds, before.max_seconds) == (2, 0.5, 1.0)
    assert this.count == 4 and this.max_seconds == 3.0
    # percentile_cont: linear between the nearest ranks of 0.1, 0.2, 0.4, 3.0.
    assert this.p50_seconds == pytest.approx(0.3)
    assert this.p99_seconds == pytest.approx(0.4 + 0.97 * 2.6)
    # A window of one minute is the current minute alone; one that ended
    # before the attempts has none of them.
    assert [m.minute for m in await h.store.start_lateness(SHARD, LatenessParams(1, now))] == [minute]
    assert await h.store.start_lateness(SHARD, LatenessParams(5, minute - timedelta(minutes=5))) == []
    [shard1] = await h.store.start_lateness(1, LatenessParams(15, now))
    assert (shard1.count, shard1.p50_seconds) == (1, 9.0)
