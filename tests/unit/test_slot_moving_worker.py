"""The worker meets a slot moving off its shard (issue 42): the shard writes
the completions and heartbeats of every other job of a batch and refuses
those of the moving slot (:class:`SlotMoving`). The worker neither fails
the batch nor takes the refused jobs for lost (their rows move with their
attempt and lease)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY

import shardmap
from cluster.clock import FakeClock
from cluster.errors import SlotMoving
from cluster.model import (
    ClaimedJob,
    ClaimParams,
    CreateJobParams,
    FinishParams,
    HeartbeatParams,
    JobResult,
    Outcome,
)
from cluster.store.memory import MemStore
from cluster.worker.completer import Completer
from cluster.worker.heartbeat import Heartbeat
from cluster.worker.inflight import InFlight

MOVING = 7


class MovingStore(MemStore):
    """A shard that has slot :data:`MOVING` fenced, as PgStore answers."""

    async def finish_jobs(self, shard: int, params: FinishParams) -> set[uuid.UUID]:
        keep = tuple(r for r in params.results if shardmap.slot_of(r.lease.id) != MOVING)
        refused = frozenset(r.lease.id for r in params.results) - {r.lease.id for r in keep}
        written = await super().finish_jobs(shard, FinishParams(keep, params.now))
        raise SlotMoving(shard, MOVING, written=frozenset(written), refused=refused)

    async def heartbeat(self, shard: int, params: HeartbeatParams) -> set[uuid.UUID]:
        keep = tuple(x for x in params.leases if shardmap.slot_of(x.id) != MOVING)
        refused = frozenset(x.id for x in params.leases) - {x.id for x in keep}
        held = await super().heartbeat(
            shard, HeartbeatParams(keep, params.lease_seconds, params.grace_seconds)
        )
        raise SlotMoving(shard, MOVING, written=frozenset(held), refused=refused)


def fenced() -> float:
    return (
        REGISTRY.get_sample_value(
            "vakit_fenced_writes_total", {"shard": "0", "operation": "complete"}
        )
        or 0.0
    )


async def two_running(store: MemStore) -> list[ClaimedJob]:
    now = store.clock.now() - timedelta(seconds=1)
    for slot in (MOVING, MOVING + 1):
        await store.create_job(
            0,
            CreateJobParams(
                id=shardmap.new_uuid(slot), owner="svc", type="T", run_at=now, scheduled_for=now,
                target={"kind": "HTTP", "url": "https://x.example/"}, payload=None,
                max_attempts=3, timeout_seconds=5,
            ),
        )  # fmt: skip
    return await store.claim_jobs(0, ClaimParams("w1", 10, 30, 0))


async def test_a_completion_batch_is_written_but_for_the_moving_slot() -> None:
    store = MovingStore(1, FakeClock(datetime.now(UTC)))
    claimed = await two_running(store)
    inflight = {j.id: InFlight(j, 0, j.lease_until, "job_x") for j in claimed}
    started = asyncio.Event()
    started.set()
    completer = Completer(
        0, store, inflight, batch=10, linger=0, started=started,
        give_up=lambda: False, on_written=lambda: None,
    )  # fmt: skip
    before = fenced()
    now = store.clock.now()
    results = [JobResult(j.lease, Outcome.SUCCEEDED, "w1", now, 0.0) for j in claimed]
    assert await completer.write(results) == 1
    assert fenced() == before  # refused for the move, not lost to another attempt
    assert inflight == {}


async def test_a_heartbeat_keeps_the_jobs_of_the_moving_slot() -> None:
    clock = FakeClock(datetime.now(UTC))
    store = MovingStore(1, clock)
    claimed = await two_running(store)
    inflight = {0: {j.id: InFlight(j, 0, j.lease_until, "job_x") for j in claimed}}
    lost: list[bool] = []
    beat = Heartbeat(
        store, clock, inflight, lease_seconds=30, grace_seconds=0, every=1,
        on_lost=lambda: lost.append(True),
    )  # fmt: skip
    assert await beat.run_once(0) == 0
    assert set(inflight[0]) == {j.id for j in claimed} and not lost
