"""Limits that hold across the cluster, on real PostgreSQL shards (issue 44):
two workers share one limit (concurrency and rate measured at the target),
a job held back by it is SCHEDULED and cancels, other keys go by, and the
database's limit key is the one Python computes.

The SIGKILL of a worker holding permits is in tests/faults/test_limit_faults.py."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from aiohttp import web

import shardmap
from cluster.config import Settings
from cluster.coordination.base import StaticCoordinator
from cluster.model import CancelParams, ClaimedJob, GetJobParams, JobStatus
from cluster.store.postgres import PgStore
from cluster.targets import FireResult
from cluster.targets.http import HttpTarget
from cluster.targets.policy import AddressPolicy
from cluster.worker.limits import target_key
from cluster.worker.worker import Worker
from tests.helpers import job_params
from tests.integration.test_http_target import job as http_job

pytestmark = pytest.mark.integration


def test_the_database_computes_the_limit_key_python_does(shard_dsns: list[str]) -> None:
    targets = [
        {"kind": "HTTP", "url": "https://Hooks.Example.com/x?y=1"},
        {"kind": "HTTP", "url": "http://user:pw@LocalHost:8080/fire"},
        {"kind": "HTTP", "url": "http://[::1]:9/x"},
        {"kind": "HTTP", "url": "http://127.0.0.1/"},
        {"kind": "HTTP", "url": "https://a.b.example#frag"},
        {"kind": "KAFKA", "topic": "orders"},
        {"kind": "NOOP"},
    ]
    with psycopg.connect(shard_dsns[0], autocommit=True) as conn:
        for target in targets:
            row = conn.execute(
                "SELECT vakit_limit_key(%s, %s::jsonb)", (target["kind"], json.dumps(target))
            ).fetchone()
            assert row is not None and row[0] == target_key(target), target


class Meter:
    """The target: counts firings in flight and their start times, by host."""

    kind = "HTTP"
    enforces_timeout = False

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.now: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.starts: dict[str, list[float]] = {}
        self.late: dict[str, list[float]] = {}
        self.fired: set[str] = set()

    async def fire(self, job: ClaimedJob, job_id: str, timeout: float) -> FireResult:
        host = target_key(job.target)
        now = time.time()
        self.fired.add(job_id)
        self.starts.setdefault(host, []).append(now)
        self.late.setdefault(host, []).append(now - job.run_at.timestamp())
        self.now[host] = self.now.get(host, 0) + 1
        self.peak[host] = max(self.peak.get(host, 0), self.now[host])
        await asyncio.sleep(self.seconds)
        self.now[host] -= 1
        return FireResult.success()

    async def close(self) -> None:
        return None


def most_in_a_second(starts: list[float]) -> int:
    starts = sorted(starts)
    most = j = 0
    for i, at in enumerate(starts):
        while starts[j] <= at - 1.0:
            j += 1
        most = max(most, i - j + 1)
    return most


async def test_two_workers_hold_one_limit_and_a_held_job_cancels(
    store: PgStore, shard_dsns: list[str]
) -> None:
    # "localhost" is limited to 4 at once and 40/s for the cluster; "127.0.0.1"
    # is not. 120 jobs of each, due now, on both shards; two workers, each
    # polling both shards (as two owners of a shard might, in a handover).
    shards = shardmap.ShardMap(len(shard_dsns))
    due = datetime.now(UTC) + timedelta(seconds=1.5)
    limited = [job_params("http://localhost:9/x", run_at=due) for _ in range(120)]
    free = [job_params("http://127.0.0.1:9/x", run_at=due) for _ in range(120)]
    for p in [*limited, *free]:
        await store.create_job(shards.shard_of(p.id), p)
    meter = Meter(0.05)
    settings = Settings(
        shards=shard_dsns,
        target_limits={"localhost": "4/40/2"},
        lease_seconds=30,
        poll_interval=0.1,
        complete_linger=0.002,
    )
    workers = [
        Worker(settings, store, StaticCoordinator(f"w{i}", len(shard_dsns)), {"HTTP": meter},
               worker_id=f"w{i}")
        for i in range(2)
    ]  # fmt: skip
    for w in workers:
        w.start()
    try:
        # A job held back: SCHEDULED, without a lease; DELETE cancels it.
        await asyncio.sleep(2.0)
        victim = limited[-1]
        shard = shards.shard_of(victim.id)
        held = await store.get_job(shard, GetJobParams(victim.id, "svc"))
        assert held is not None and held.status is JobStatus.SCHEDULED
        cancelled = await store.cancel_job(shard, CancelParams(victim.id, "svc"))
        assert cancelled.status is JobStatus.CANCELLED
        deadline = time.monotonic() + 20
        while len(meter.fired) < 239 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
    finally:
        for w in workers:
            await w.stop(grace=5)
    assert shardmap.encode_id("job", victim.id) not in meter.fired
    assert len(meter.fired) == 239
    assert meter.peak["localhost"] <= 4
    assert most_in_a_second(meter.starts["localhost"]) <= 40 + 2
    # 119 jobs at 40/s: about 3 s, not much more (the limit is used, not halved).
    span = max(meter.starts["localhost"]) - min(meter.starts["localhost"])
    assert span <= 119 / 40 * 1.6
    # The other key went by: every one of its jobs started on time.
    late = sorted(meter.late["127.0.0.1"])
    assert late[int(len(late) * 0.99) - 1] < 0.5
    print(
        f"\nlocalhost: peak {meter.peak['localhost']} at once, "
        f"{most_in_a_second(meter.starts['localhost'])} in one second, span {span:.2f} s; "
        f"127.0.0.1 p99 lateness {late[int(len(late) * 0.99) - 1]:.3f} s"
    )


async def test_the_http_target_reports_retry_after_on_429_and_503() -> None:
    async def busy(request: web.Request) -> web.Response:
        status = int(request.query.get("status", "429"))
        return web.Response(status=status, headers={"Retry-After": "3"})

    app = web.Application()
    app.router.add_post("/", busy)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    target = HttpTarget(AddressPolicy(allow_private=True))
    try:
        for status, pause in (("429", 3.0), ("503", 3.0), ("500", None)):
            result = await target.fire(http_job(f"http://127.0.0.1:{port}/?status={status}"), "job_x", 5.0)
            assert (result.ok, result.retryable, result.retry_after) == (False, True, pause)
    finally:
        await target.close()
        await runner.cleanup()
