"""The dead-letter metric names the owner: a configured tenant by name, any
other as 'other' (a bounded label), whether the job failed at the worker
(the completer) or because its last attempt's lease ran out (the reaper)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY

import shardmap
from cluster.clock import FakeClock
from cluster.leader.reaper import Reaper
from cluster.model import ClaimParams, CreateJobParams, JobResult, Outcome
from cluster.store.memory import MemStore
from cluster.worker.completer import Completer
from cluster.worker.inflight import InFlight


def failed(owner: str) -> float:
    labels = {"shard": "0", "target_kind": "HTTP", "owner": owner}
    return REGISTRY.get_sample_value("vakit_jobs_failed_total", labels) or 0.0


async def due_job(store: MemStore, owner: str) -> None:
    now = store.clock.now() - timedelta(seconds=1)
    await store.create_job(
        0,
        CreateJobParams(
            id=shardmap.new_uuid(), owner=owner, type="T", run_at=now, scheduled_for=now,
            target={"kind": "HTTP", "url": "https://x.example/"}, payload=None,
            max_attempts=1, timeout_seconds=5,
        ),
    )  # fmt: skip


async def test_the_reaper_counts_lease_expiries_by_owner() -> None:
    clock = FakeClock(datetime.now(UTC))
    store = MemStore(1, clock)
    await due_job(store, "payments")
    await due_job(store, "someone-else")
    assert len(await store.claim_jobs(0, ClaimParams("w1", 10, 5, 0))) == 2
    before = failed("payments"), failed("other"), failed("someone-else")
    clock.advance(60)
    assert await Reaper(store, owners=frozenset({"payments"})).run_once(0) == 2
    after = failed("payments"), failed("other"), failed("someone-else")
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (1, 1, 0)


async def test_the_completer_counts_failures_by_owner() -> None:
    store = MemStore(1, FakeClock(datetime.now(UTC)))
    await due_job(store, "orders")
    [claimed] = await store.claim_jobs(0, ClaimParams("w1", 10, 30, 0))
    assert claimed.owner == "orders"
    inflight = {claimed.id: InFlight(claimed, 0, claimed.lease_until, "job_x")}
    started = asyncio.Event()
    started.set()
    completer = Completer(
        0, store, inflight, batch=10, linger=0, started=started,
        give_up=lambda: False, on_written=lambda: None, owners=frozenset({"orders"}),
    )  # fmt: skip
    before = failed("orders")
    result = JobResult(claimed.lease, Outcome.FAILED, "w1", store.clock.now(), 0.0, "HTTP 400")
    assert await completer.write([result]) == 1
    assert failed("orders") - before == 1
