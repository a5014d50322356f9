"""Preloading without knobs: a worker that sees a wave coming claims its share
ahead of time, within its memory budget, and nothing more.

The real Worker on the in-memory store, with a fake clock: nothing sleeps
until a wave's instant (held jobs are released by ``stop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import tracemalloc
from collections import Counter
from datetime import UTC, datetime, timedelta

import shardmap
from cluster.clock import FakeClock
from cluster.config import Settings
from cluster.coordination.base import StaticCoordinator
from cluster.model import (
    ClaimedJob,
    ClaimParams,
    CreateJobParams,
    DueSecond,
    FinishParams,
    GetJobParams,
    JobStatus,
    WorkerBeatParams,
)
from cluster.store.memory import MemStore
from cluster.targets import FireResult
from cluster.targets.http import HttpTarget
from cluster.targets.noop import NoopTarget
from cluster.targets.policy import AddressPolicy
from cluster.worker.preload import JOB_BYTES, budget_jobs, plan_preload, wave_threshold
from cluster.worker.worker import Worker

T0 = datetime(2026, 11, 30, 23, 59, 50, tzinfo=UTC)
WAVE_AT = T0 + timedelta(seconds=5)
# With the default max_inflight (5,000) and one shard, a second with more
# than 2,500 jobs per worker is a wave.
THRESHOLD = wave_threshold(5_000, 1)


class CountingTarget:
    kind = "HTTP"
    enforces_timeout = False

    def __init__(self) -> None:
        self.fired: list[str] = []

    async def fire(self, job: ClaimedJob, job_id: str, timeout: float) -> FireResult:
        self.fired.append(job_id)
        return FireResult.success()

    async def close(self) -> None:
        return None


def worker(store: MemStore, clock: FakeClock, name: str = "w1", **over: object) -> Worker:
    base: dict[str, object] = {"shards": ["x"], "lease_seconds": 30, "lease_grace_seconds": 5}
    base.update(over)
    settings = Settings(**base)  # type: ignore[arg-type]
    return Worker(
        settings, store, StaticCoordinator(name, 1), {"HTTP": CountingTarget()}, clock=clock, worker_id=name
    )


async def add_jobs(store: MemStore, run_at: datetime, count: int) -> list[CreateJobParams]:
    jobs = [
        CreateJobParams(
            id=shardmap.new_uuid(0),
            owner="svc",
            type="T",
            run_at=run_at,
            scheduled_for=run_at,
            target={"kind": "HTTP", "url": "https://x.example/"},
            payload={},
            max_attempts=3,
            timeout_seconds=30,
        )
        for _ in range(count)
    ]
    for p in jobs:
        await store.create_job(0, p)
    return jobs


async def statuses(store: MemStore, jobs: list[CreateJobParams]) -> Counter[JobStatus]:
    found = [await store.get_job(0, GetJobParams(p.id, "svc")) for p in jobs]
    return Counter(j.status for j in found if j is not None)


async def preload_all(w: Worker) -> int:
    """Rounds until the worker takes no more."""
    total = 0
    while n := await w.preload_once(0):
        total += n
    return total


# -- the plan, pure ------------------------------------------------------------


def test_no_wave_no_plan() -> None:
    steady = [DueSecond(T0 + timedelta(seconds=i), 116) for i in range(10)]
    assert plan_preload(steady, workers=1, threshold=THRESHOLD, room=100_000) is None


def test_a_wave_is_split_among_the_workers_and_bounded_by_the_room() -> None:
    forecast = [
        DueSecond(T0, 100),  # before the wave: left to the regular claims
        DueSecond(WAVE_AT, 50_000),
        DueSecond(WAVE_AT + timedelta(seconds=1), 10),  # after it: not preloaded
    ]
    plan = plan_preload(forecast, workers=2, threshold=THRESHOLD, room=100_000, most=1_000_000)
    assert plan is not None
    assert plan.window == (WAVE_AT, WAVE_AT + timedelta(seconds=1))
    assert plan.jobs == 25_000  # half of the wave: two workers poll the shard
    small = plan_preload(forecast, workers=2, threshold=THRESHOLD, room=7_000, most=1_000_000)
    assert small is not None and small.jobs == 7_000
    assert plan_preload(forecast, workers=2, threshold=THRESHOLD, room=0) is None


def test_a_second_is_a_wave_by_its_share_per_worker() -> None:
    forecast = [DueSecond(WAVE_AT, 4 * THRESHOLD)]
    assert plan_preload(forecast, workers=3, threshold=THRESHOLD, room=10**6) is not None
    assert plan_preload(forecast, workers=4, threshold=THRESHOLD, room=10**6) is None


def test_the_budget_is_a_job_count_from_the_measured_cost() -> None:
    assert budget_jobs(256 * 1024 * 1024) == 256 * 1024 * 1024 // JOB_BYTES
    assert budget_jobs(0) == 0


# -- the worker, on the in-memory store ---------------------------------------------


async def test_a_wave_coming_is_preloaded_up_to_the_budget_and_no_further() -> None:
    clock = FakeClock(T0)
    store = MemStore(1, clock)
    jobs = await add_jobs(store, T0 + timedelta(seconds=1), 50)  # ordinary jobs before the wave
    jobs += await add_jobs(store, WAVE_AT, 4_000)
    budget = 1_200
    w = worker(store, clock, preload_memory_bytes=budget * JOB_BYTES)
    try:
        assert await preload_all(w) == budget
        assert w.preloaded_count == budget == w.inflight_count
        held = list(w.inflight(0).values())
        assert all(e.task is None and e.job.run_at == WAVE_AT for e in held)  # held, not started
        # Each lease covers the wait: it runs from the job's run_at.
        assert all(e.lease_until == WAVE_AT + timedelta(seconds=35) for e in held)
        counts = await statuses(store, jobs)
        assert counts == {JobStatus.RUNNING: budget, JobStatus.SCHEDULED: 4_050 - budget}
        # The regular claims still take the jobs due before the wave: the
        # preloaded ones have their own budget.
        clock.advance(1)
        assert await w.run_once(0) == 50
    finally:
        await w.stop(grace=0)


async def test_no_wave_means_no_extra_held_jobs() -> None:
    clock = FakeClock(T0)
    store = MemStore(1, clock)
    jobs = []
    for i in range(1, 10):  # steady load: a few jobs every second ahead
        jobs += await add_jobs(store, T0 + timedelta(seconds=i), 100)
    w = worker(store, clock)
    try:
        assert await w.preload_once(0) == 0
        assert w.inflight_count == 0 and w.preloaded_count == 0
        assert await statuses(store, jobs) == {JobStatus.SCHEDULED: 900}
        # Only what is due within prefetch_seconds (1 s) is claimed.
        assert await w.run_once(0) == 100
    finally:
        await w.stop(grace=0)


async def test_preloading_off_with_a_zero_budget() -> None:
    clock = FakeClock(T0)
    store = MemStore(1, clock)
    await add_jobs(store, WAVE_AT, 3_000)
    w = worker(store, clock, preload_memory_bytes=0)
    try:
        assert await w.preload_once(0) == 0 and w.inflight_count == 0
    finally:
        await w.stop(grace=0)


async def test_workers_on_a_shard_take_their_shares() -> None:
    clock = FakeClock(T0)
    store = MemStore(1, clock)
    jobs = await add_jobs(store, WAVE_AT, 12_000)
    # Both poll the shard (their beat loops say so), and look ahead in turn.
    for name in ("a", "b"):
        await store.worker_beat(0, WorkerBeatParams(name))
    a, b = worker(store, clock, "a"), worker(store, clock, "b")
    a.preloader.round_jobs = b.preloader.round_jobs = 1_000
    try:
        while (await a.preload_once(0)) + (await b.preload_once(0)):
            pass
        # Each took half of what was preloaded, give or take the last round;
        # neither hoarded the wave.
        assert a.preloaded_count > 0 and b.preloaded_count > 0
        assert abs(a.preloaded_count - b.preloaded_count) <= 1_000
        # What is left is no wave for two workers: the regular claims take
        # it at its time.
        left = (await statuses(store, jobs))[JobStatus.SCHEDULED]
        assert left == 12_000 - a.preloaded_count - b.preloaded_count
        assert left <= 2 * THRESHOLD
    finally:
        await a.stop(grace=0)
        await b.stop(grace=0)


async def test_a_lone_worker_takes_the_wave_until_what_is_left_is_none() -> None:
    clock = FakeClock(T0)
    store = MemStore(1, clock)
    await add_jobs(store, WAVE_AT, 6_000)
    w = worker(store, clock)
    try:
        got = await preload_all(w)
        # Rounds of 5,000: the 1,000 left are fewer than the regular claims
        # start on time (the threshold), so they are left to them.
        assert got == 5_000 and 6_000 - got <= THRESHOLD
    finally:
        await w.stop(grace=0)


async def test_set_knobs_win_max_inflight_bounds_preloaded_jobs_too() -> None:
    clock = FakeClock(T0)
    store = MemStore(1, clock)
    await add_jobs(store, WAVE_AT, 4_000)
    w = worker(store, clock, max_inflight=1_000)  # set: a total bound
    try:
        # threshold with max_inflight 1,000: 500 per second; the wave is one.
        assert await preload_all(w) == 1_000
        assert w.inflight_count == 1_000
        assert await w.run_once(0) == 0  # no room left for anything
    finally:
        await w.stop(grace=0)


async def test_preloaded_jobs_come_back_when_the_worker_stops() -> None:
    clock = FakeClock(T0)
    store = MemStore(1, clock)
    jobs = await add_jobs(store, WAVE_AT, 3_000)
    w = worker(store, clock)
    assert await preload_all(w) == 3_000
    await w.stop(grace=0)
    assert await statuses(store, jobs) == {JobStatus.SCHEDULED: 3_000}
    assert w.preloaded_count == 0


# -- what a held and started job costs ------------------------------------------------


class RowStore:
    """Claims rows shaped as the PostgreSQL store makes them (a new uuid and
    new datetimes per row, one shared target, the payload as text) and
    writes nothing: only the worker's own memory is measured."""

    shard_count = 1

    def __init__(self, count: int, due: datetime, target: dict[str, object] | None = None) -> None:
        self.left = count
        self.due = due.timestamp()
        self.target = target or {"kind": "NOOP"}

    async def claim_jobs(self, shard: int, params: ClaimParams) -> list[ClaimedJob]:
        n = min(params.limit, self.left)
        self.left -= n
        target = self.target
        return [
            ClaimedJob(
                shardmap.new_uuid(0),
                1,
                3,
                "bench.wave",
                datetime.fromtimestamp(self.due, UTC),
                datetime.fromtimestamp(self.due, UTC),
                30,
                target,
                "{}",
                datetime.fromtimestamp(self.due + 40, UTC),
            )
            for _ in range(n)
        ]

    async def finish_jobs(self, shard: int, params: FinishParams) -> set[object]:
        return set()


async def test_a_held_and_started_job_costs_less_than_job_bytes() -> None:
    n = 5_000
    due = datetime.now(UTC) + timedelta(seconds=0.3)
    knobs: dict[str, object] = {"shards": ["x"], "prefetch_seconds": 10, "max_inflight": n, "claim_batch": 1_000}
    settings = Settings(**knobs)  # type: ignore[arg-type]
    store = RowStore(n, due)
    w = Worker(settings, store, StaticCoordinator("w", 1), {"NOOP": NoopTarget()}, worker_id="w")  # type: ignore[arg-type]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        while await w.run_once(0):
            pass
        assert w.inflight_count == n
        tasks: list[asyncio.Task[None]] = []
        for _ in range(200):  # until the wheel has started every job
            tasks = [e.task for e in w.inflight(0).values() if e.task]
            if len(tasks) == n:
                break
            await asyncio.sleep(0.01)
        await asyncio.wait(tasks)
        per_job = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    assert per_job < JOB_BYTES, per_job
    assert w.inflight_count == n  # outcomes still queued: the peak, not after it


async def test_an_http_firing_waiting_for_a_connection_costs_less_than_job_bytes() -> None:
    # The HTTP target's peak: a wave's firings started at once and most of
    # them waiting for one of the pool's connections (the receiver here
    # never answers). A worker held 650 MB for 50,000 of them on aiohttp.
    n, pool = 5_000, 20
    requests = 0
    done = asyncio.Event()

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            requests += 1
            await done.wait()
        writer.close()

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    due = datetime.now(UTC) + timedelta(seconds=0.3)
    knobs: dict[str, object] = {"shards": ["x"], "prefetch_seconds": 10, "max_inflight": n, "claim_batch": 1_000}
    settings = Settings(**knobs)  # type: ignore[arg-type]
    store = RowStore(n, due, {"kind": "HTTP", "url": f"http://127.0.0.1:{port}/fire"})
    target = HttpTarget(AddressPolicy(allow_private=True), pool)
    w = Worker(settings, store, StaticCoordinator("w", 1), {"HTTP": target}, worker_id="w")  # type: ignore[arg-type]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        while await w.run_once(0):
            pass
        for _ in range(300):  # until every job has started and the pool is busy
            if requests == pool and sum(1 for e in w.inflight(0).values() if e.task) == n:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the rest reach the pool's queue
        assert requests == pool
        per_job = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
        await w.stop(grace=0)
        await target.close()
        done.set()
        server.close()
        await server.wait_closed()
    assert per_job < JOB_BYTES, per_job




async def test_a_backlog_grows_the_regular_claims_and_a_short_claim_shrinks_them() -> None:
    clock = FakeClock(T0)
    store = MemStore(1, clock)
    await add_jobs(store, T0, 3_000)  # due now: more than one claim takes
    w = worker(store, clock)
    try:
        # Each full claim doubles the next, up to a preloading claim's size.
        assert [await w.run_once(0) for _ in range(5)] == [100, 200, 400, 800, 1_000]
        # 500 were left: a short claim, and the next is claim_batch again.
        assert await w.run_once(0) == 500
        await add_jobs(store, T0, 1_000)
        assert await w.run_once(0) == 100
    finally:
        await w.stop(grace=0)


async def test_a_claim_batch_set_by_the_operator_is_kept_under_a_backlog() -> None:
    clock = FakeClock(T0)
    store = MemStore(1, clock)
    await add_jobs(store, T0, 1_000)
    w = worker(store, clock, claim_batch=100)
    try:
        assert [await w.run_once(0) for _ in range(4)] == [100, 100, 100, 100]
    finally:
        await w.stop(grace=0)
