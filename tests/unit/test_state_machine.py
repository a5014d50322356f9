"""The job state machine as the Worker drives it, on the in-memory store with
a fake clock and a fake target: no server, no sleeping.

The store's own rules (claim, fencing, retries, reaper, release, cancel and
reschedule, far and near, history) are held by the contract suite,
tests/contract/test_store_contract.py, against this store and PostgreSQL
alike; here are the rules the Worker adds on top (backoff, max attempts,
timeouts, heartbeats, preloading, graceful stop)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

import shardmap
from cluster.clock import FakeClock
from cluster.config import Settings
from cluster.coordination.base import StaticCoordinator
from cluster.leader.reaper import Reaper
from cluster.model import (
    ClaimedJob,
    CreateJobParams,
    GetJobParams,
    JobRecord,
    JobStatus,
)
from cluster.store.memory import MemStore
from cluster.targets import FireResult
from cluster.worker import worker as worker_module
from cluster.worker.worker import Worker

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class FakeTarget:
    kind = "HTTP"
    enforces_timeout = False  # the worker times each firing

    def __init__(self, respond: Callable[[ClaimedJob], Awaitable[FireResult]] | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.respond = respond

    async def fire(self, job: ClaimedJob, job_id: str, timeout: float) -> FireResult:
        self.calls.append((job_id, job.attempt))
        if self.respond is None:
            return FireResult.success()
        return await self.respond(job)

    async def close(self) -> None:
        return None


def settings(**over: object) -> Settings:
    base: dict[str, object] = {
        "shards": ["x"],
        "lease_seconds": 30,
        "lease_grace_seconds": 0,
        "backoff_base": 10,
        "complete_linger": 0,
    }
    base.update(over)
    return Settings(**base)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(clock: FakeClock) -> MemStore:
    return MemStore(1, clock)


def make_worker(store: MemStore, clock: FakeClock, target: FakeTarget, name: str = "w1", **over: object) -> Worker:
    s = settings(**over)
    return Worker(s, store, StaticCoordinator(name, 1), {"HTTP": target}, clock=clock, worker_id=name, rand=lambda: 1.0)


async def add_job(store: MemStore, run_at: datetime = T0, max_attempts: int = 3, timeout: int = 60) -> CreateJobParams:
    p = CreateJobParams(
        id=shardmap.new_uuid(0),
        owner="svc",
        type="T",
        run_at=run_at,
        scheduled_for=run_at,
        target={"kind": "HTTP", "url": "https://x.example/"},
        payload={},
        max_attempts=max_attempts,
        timeout_seconds=timeout,
    )
    await store.create_job(0, p)
    return p


async def settle(worker: Worker) -> None:
    """Let the job tasks run, then write their outcomes."""
    tasks = [e.task for e in worker.inflight(0).values() if e.task]
    if tasks:
        await asyncio.wait(tasks, timeout=5)
    await worker.flush_once(0, wait=False)


async def status(store: MemStore, p: CreateJobParams) -> JobRecord:
    job = await store.get_job(0, GetJobParams(p.id, "svc"))
    assert job is not None
    return job


async def test_success(store: MemStore, clock: FakeClock) -> None:
    p = await add_job(store)
    target = FakeTarget()
    worker = make_worker(store, clock, target)
    assert await worker.run_once(0) == 1
    await settle(worker)
    job = await status(store, p)
    assert job.status is JobStatus.SUCCEEDED and job.attempt == 1
    assert [a.outcome for a in job.attempts] == ["SUCCEEDED"]
    assert target.calls == [(shardmap.encode_id("job", p.id), 1)]
    assert worker.inflight_count == 0


async def test_not_due_not_claimed(store: MemStore, clock: FakeClock) -> None:
    await add_job(store, run_at=T0 + timedelta(seconds=5))
    worker = make_worker(store, clock, FakeTarget())
    assert await worker.run_once(0) == 0
    clock.advance(5)
    assert await worker.run_once(0) == 1


async def test_retry_with_backoff_then_success(store: MemStore, clock: FakeClock) -> None:
    p = await add_job(store)

    async def flaky(job: ClaimedJob) -> FireResult:
        return FireResult.retry("HTTP 503") if job.attempt == 1 else FireResult.success()

    worker = make_worker(store, clock, FakeTarget(flaky))
    await worker.run_once(0)
    await settle(worker)
    job = await status(store, p)
    assert job.status is JobStatus.SCHEDULED and job.last_error == "HTTP 503"
    assert job.run_at == T0 + timedelta(seconds=10)  # backoff(1) with rand=1.0 and base 10
    assert await worker.run_once(0) == 0  # not before the backoff
    clock.advance(10)
    assert await worker.run_once(0) == 1
    await settle(worker)
    job = await status(store, p)
    assert job.status is JobStatus.SUCCEEDED and job.attempt == 2
    assert [a.outcome for a in job.attempts] == ["ERROR", "SUCCEEDED"]


async def test_failed_after_max_attempts(store: MemStore, clock: FakeClock) -> None:
    p = await add_job(store, max_attempts=2)

    async def broken(job: ClaimedJob) -> FireResult:
        return FireResult.retry("HTTP 500")

    worker = make_worker(store, clock, FakeTarget(broken))
    for _ in range(2):
        await worker.run_once(0)
        await settle(worker)
        clock.advance(3600)
    job = await status(store, p)
    assert job.status is JobStatus.FAILED and job.attempt == 2 and job.last_error == "HTTP 500"


def fires(result: str) -> float:
    # x.example is not a declared target (metrics_targets): its series is "other".
    labels = {"target": "other", "result": result}
    return REGISTRY.get_sample_value("vakit_target_fires_total", labels) or 0.0


async def test_permanent_error_fails_at_once(store: MemStore, clock: FakeClock) -> None:
    p = await add_job(store, max_attempts=5)

    async def gone(job: ClaimedJob) -> FireResult:
        return FireResult.permanent("HTTP 404")

    rejected = fires("rejected")
    worker = make_worker(store, clock, FakeTarget(gone))
    await worker.run_once(0)
    await settle(worker)
    job = await status(store, p)
    assert job.status is JobStatus.FAILED and job.attempt == 1
    assert fires("rejected") == rejected + 1  # the per-target error rate sees it


def lateness_observed() -> float:
    labels = {"shard": "0", "target_kind": "HTTP"}
    return REGISTRY.get_sample_value("vakit_job_start_lateness_seconds_count", labels) or 0.0


async def test_lateness_is_recorded_when_the_firing_starts(store: MemStore, clock: FakeClock) -> None:
    # Recorded just after the pass of the event loop that starts the firing,
    # not when the target answers: a hanging target still shows its lateness.
    await add_job(store)
    gate = asyncio.Event()

    async def hanging(job: ClaimedJob) -> FireResult:
        await gate.wait()
        return FireResult.success()

    before = lateness_observed()
    worker = make_worker(store, clock, FakeTarget(hanging))
    await worker.run_once(0)
    for _ in range(3):
        await asyncio.sleep(0)
    assert lateness_observed() == before + 1
    gate.set()
    await settle(worker)
    assert lateness_observed() == before + 1  # once per firing


async def test_an_attempt_records_when_its_firing_started(store: MemStore, clock: FakeClock) -> None:
    # A start reads the clock once, as POSIX seconds, and queues its outcome
    # as the firing left it; the completer makes the attempt's record later.
    # The record still says when the firing started, and how late.
    p = await add_job(store)
    clock.advance(2.5)
    gate = asyncio.Event()
    started: list[datetime] = []

    async def slow(job: ClaimedJob) -> FireResult:
        started.append(clock.now())
        await gate.wait()
        return FireResult.success()

    worker = make_worker(store, clock, FakeTarget(slow))
    await worker.run_once(0)
    for _ in range(3):
        await asyncio.sleep(0)
    assert started == [T0 + timedelta(seconds=2.5)]
    clock.advance(40)  # the target answers much later
    gate.set()
    await settle(worker)
    [attempt] = (await status(store, p)).attempts
    assert attempt.started_at == T0 + timedelta(seconds=2.5)
    assert attempt.lateness_seconds == pytest.approx(2.5)
    assert attempt.finished_at == T0 + timedelta(seconds=42.5)


async def test_timeout_is_retried(store: MemStore, clock: FakeClock) -> None:
    p = await add_job(store, timeout=1)

    async def slow(job: ClaimedJob) -> FireResult:
        await asyncio.sleep(30)
        return FireResult.success()

    worker = make_worker(store, clock, FakeTarget(slow))
    await worker.run_once(0)
    await settle(worker)
    job = await status(store, p)
    assert job.status is JobStatus.SCHEDULED and "timed out" in (job.last_error or "")


async def test_stale_worker_is_fenced(store: MemStore, clock: FakeClock) -> None:
    p = await add_job(store)
    gate = asyncio.Event()

    async def held(job: ClaimedJob) -> FireResult:
        if job.attempt == 1:
            await gate.wait()  # the "GC pause": worker 1 is stuck in the firing
        return FireResult.success()

    target = FakeTarget(held)
    w1 = make_worker(store, clock, target, "w1")
    w2 = make_worker(store, clock, target, "w2")
    await w1.run_once(0)
    await asyncio.sleep(0)
    clock.advance(31)  # past the lease
    assert await Reaper(store).run_once(0) == 1
    assert await w2.run_once(0) == 1
    await settle(w2)
    assert (await status(store, p)).status is JobStatus.SUCCEEDED
    gate.set()  # worker 1 wakes up and tries to complete attempt 1
    await settle(w1)
    job = await status(store, p)
    assert job.status is JobStatus.SUCCEEDED and job.attempt == 2
    assert [(a.attempt, a.outcome) for a in job.attempts] == [(1, "LEASE_EXPIRED"), (2, "SUCCEEDED")]
    assert target.calls[0][1] == 1 and target.calls[1][1] == 2


async def test_lost_heartbeat_drops_job(store: MemStore, clock: FakeClock) -> None:
    await add_job(store)
    started = asyncio.Event()

    async def long(job: ClaimedJob) -> FireResult:
        started.set()
        await asyncio.sleep(3600)
        return FireResult.success()

    w1 = make_worker(store, clock, FakeTarget(long))
    await w1.run_once(0)
    await started.wait()
    clock.advance(31)
    await Reaper(store).run_once(0)
    assert await w1.heartbeat_once(0) == 1
    assert w1.inflight_count == 0


async def test_heartbeat_keeps_long_job(store: MemStore, clock: FakeClock) -> None:
    p = await add_job(store, timeout=3600)
    gate = asyncio.Event()

    async def long(job: ClaimedJob) -> FireResult:
        await gate.wait()
        return FireResult.success()

    w1 = make_worker(store, clock, FakeTarget(long))
    await w1.run_once(0)
    for _ in range(5):  # 5 x 20 s > the 30 s lease, kept alive by heartbeats
        clock.advance(20)
        assert await w1.heartbeat_once(0) == 0
        assert await Reaper(store).run_once(0) == 0
    gate.set()
    await settle(w1)
    assert (await status(store, p)).status is JobStatus.SUCCEEDED


async def test_graceful_stop_releases_unfired_with_refund(store: MemStore, clock: FakeClock) -> None:
    p = await add_job(store, run_at=T0 + timedelta(seconds=100), max_attempts=1)
    worker = make_worker(store, clock, FakeTarget(), prefetch_seconds=200)
    worker.start()
    await asyncio.sleep(0.05)
    assert worker.inflight_count == 1  # preloaded, waiting for its run_at
    await worker.stop(grace=0)
    job = await status(store, p)
    assert job.status is JobStatus.SCHEDULED and job.max_attempts == 2


async def test_preloaded_jobs_start_at_their_run_at_never_before() -> None:
    # Real clock: jobs claimed ahead of time wait in the timing wheel.
    store = MemStore(1)
    due = datetime.now(UTC) + timedelta(seconds=0.3)
    for run_at in [due] * 50 + [due + timedelta(seconds=0.2)]:
        await add_job(store, run_at=run_at)
    fired: list[tuple[datetime, datetime]] = []

    async def record(job: ClaimedJob) -> FireResult:
        fired.append((datetime.now(UTC), job.run_at))
        return FireResult.success()

    s = settings(prefetch_seconds=5)
    worker = Worker(s, store, StaticCoordinator("w1", 1), {"HTTP": FakeTarget(record)}, worker_id="w1")
    assert await worker.run_once(0) == 51
    # Held, not started: within PRESTART of their tick a task waits at its gate.
    assert fired == [] and not any(e.fired for e in worker.inflight(0).values())
    assert len(worker.wheel.timers) == 2  # one timer per instant, not per job
    for _ in range(100):
        if len(fired) == 51:
            break
        await asyncio.sleep(0.02)
    assert len(fired) == 51
    assert all(at >= run_at for at, run_at in fired)  # never early
    assert await worker.flush_once(0, wait=False) == 51
    assert worker.inflight_count == 0


async def test_a_large_instant_starts_in_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    # Held jobs due at one instant start a slice per pass of the event loop:
    # all of them, with other work (here a ticker) running in between.
    monkeypatch.setattr(worker_module, "_SLICE", 10)
    store = MemStore(1)
    due = datetime.now(UTC) + timedelta(seconds=0.2)
    for _ in range(25):
        await add_job(store, run_at=due)
    target = FakeTarget()
    fired = target.calls
    worker = Worker(settings(prefetch_seconds=5), store, StaticCoordinator("w1", 1), {"HTTP": target}, worker_id="w1")
    assert await worker.run_once(0) == 25
    seen: list[int] = []
    while len(fired) < 25:
        seen.append(len(fired))
        await asyncio.sleep(0)
    assert len({job_id for job_id, _ in fired}) == 25
    assert {10, 20} <= set(seen)  # the loop came back between slices
    assert await worker.flush_once(0, wait=False) == 25


async def test_stop_during_a_sliced_instant_releases_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module, "_SLICE", 10)
    store = MemStore(1)
    due = datetime.now(UTC) + timedelta(seconds=0.2)
    params = [await add_job(store, run_at=due, max_attempts=1) for _ in range(25)]
    first_slice = asyncio.Event()

    async def count(job: ClaimedJob) -> FireResult:
        if len(target.calls) == 10:
            first_slice.set()
        return FireResult.success()

    target = FakeTarget(count)
    worker = Worker(settings(prefetch_seconds=5), store, StaticCoordinator("w1", 1), {"HTTP": target}, worker_id="w1")
    worker.start()
    await first_slice.wait()
    await worker.stop(grace=1)
    fired = {job_id for job_id, _ in target.calls}
    assert 10 <= len(fired) < 25 and len(target.calls) == len(fired)  # stopped mid-instant
    jobs = [await status(store, p) for p in params]
    done = {shardmap.encode_id("job", j.id) for j in jobs if j.status is JobStatus.SUCCEEDED}
    back = [j for j in jobs if j.status is JobStatus.SCHEDULED]
    assert done == fired  # what fired was recorded, once
    assert len(back) == 25 - len(fired)
    assert all(j.max_attempts == 2 for j in back)  # never fired: the attempt is refunded


async def test_a_finished_job_leaves_no_reference_cycle(store: MemStore, clock: FakeClock) -> None:
    # A job's task, its log context and its in-flight entry must be freed by
    # reference counting: a cycle per job would be left for the collector,
    # which walks a whole wave's worth of them at once (a pause in the
    # middle of the next starts).
    import gc

    from cluster.worker.inflight import InFlight

    for _ in range(20):
        await add_job(store)
    worker = make_worker(store, clock, FakeTarget())
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        assert await worker.run_once(0) == 20
        await settle(worker)
        assert worker.inflight_count == 0
        gc.collect()
        cyclic = [o for o in gc.garbage if isinstance(o, InFlight)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert cyclic == []
