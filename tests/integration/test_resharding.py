"""Growing a cluster on real PostgreSQL and ZooKeeper: add a shard, rebalance,
drain, cancel, and a mover that dies between any two steps.

Each test checks the invariant the issue names: every pending job, cron and
idempotency key is on exactly one shard afterwards (the one the new map
names), none lost and none doubled, and a RUNNING job keeps its attempt.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import shardmap
from cluster.coordination.topology import ZkTopology
from cluster.errors import Conflict
from cluster.local.pgserver import PgServer
from cluster.model import ClaimParams, CreateJobParams
from cluster.resharding.control import ReshardControl
from cluster.resharding.ledger import MoveRecord
from cluster.resharding.mover import MoverSettings, SlotMover
from cluster.store.postgres import PgStore
from cluster.store.postgres.moves import PgSlotMoves
from tests.helpers import eventually, job_params
from tests.pgfixtures import drop_databases
from tests.shards import rows

pytestmark = pytest.mark.integration

FAST = MoverSettings(batch_slots=512, barrier_timeout=5.0, postpone_seconds=0.2)
MOVABLE = "SELECT id, status, attempt FROM jobs UNION ALL SELECT id, status, attempt FROM jobs_far"


@pytest.fixture
def new_dsn(pg_servers: list[PgServer]) -> Any:
    dsn = pg_servers[0].create_database(f"grow_{uuid.uuid4().hex[:10]}")
    yield dsn
    drop_databases([dsn])


@pytest.fixture
async def control(
    store: PgStore, shard_dsns: list[str], zk_connect: str
) -> AsyncIterator[ReshardControl]:
    made = ReshardControl(
        ZkTopology(zk_connect, shard_dsns), store, PgSlotMoves(store), settings=FAST, run_mover=True
    )
    await made.start()
    yield made
    await made.stop()


async def load(store: PgStore, n: int = 600) -> dict[str, Any]:
    """Pending jobs near and far, keyed ones, and a few RUNNING with their attempt."""
    shards = shardmap.SlotMap.modulo(store.shard_count)
    soon = datetime.now(UTC) + timedelta(minutes=10)
    made: list[CreateJobParams] = []
    for i in range(n):
        p = job_params(
            "http://127.0.0.1:9/x",
            run_at=soon + timedelta(seconds=i),
            key=f"k{i}" if i % 3 == 0 else None,
        )
        made.append(p)
    for _ in range(n // 6):
        made.append(
            job_params(
                "http://127.0.0.1:9/x", run_at=datetime.now(UTC) + timedelta(days=3), far=True
            )
        )
    for p in made:
        await store.create_job(shards.shard_of(p.id), p)
    running: dict[uuid.UUID, int] = {}
    due = [
        job_params("http://127.0.0.1:9/x", run_at=datetime.now(UTC) - timedelta(seconds=5))
        for _ in range(80)
    ]
    for p in due:
        await store.create_job(shards.shard_of(p.id), p)
    made.extend(due)
    for shard in range(store.shard_count):
        claimed = await store.claim_jobs(shard, ClaimParams("w1", 100, 300.0, 30.0))
        running.update({c.id: c.attempt for c in claimed})
    assert len(running) == len(due)
    return {"ids": {p.id for p in made} | set(running), "running": running}


def placed(dsns: list[str]) -> dict[uuid.UUID, list[int]]:
    """Each movable job id and the shards holding it."""
    where: dict[uuid.UUID, list[int]] = {}
    for shard, dsn in enumerate(dsns):
        for jid, _status, _attempt in rows([dsn], MOVABLE):
            where.setdefault(jid, []).append(shard)
    return where


async def wait_done(control: ReshardControl, timeout: float = 120.0) -> dict[str, Any]:
    async def ended() -> dict[str, Any] | None:
        status = await control.status()
        move = status["move"]
        return status if move and move["state"] not in ("running", "cancelling") else None

    status: dict[str, Any] = await eventually(
        ended, timeout=timeout, interval=0.2, what="the move's end"
    )
    return status


async def test_add_a_shard_and_rebalance_moves_every_row_once(
    store: PgStore, shard_dsns: list[str], new_dsn: str, control: ReshardControl
) -> None:
    loaded = await load(store)
    added = await control.add(new_dsn)
    assert added["shard"] == 2 and store.shard_count == 3
    assert control.map.shard_count == 3 and control.map.counts()[2] == 0
    await control.request("rebalance")
    status = await wait_done(control)
    assert status["move"]["state"] == "done"
    dsns = [*shard_dsns, new_dsn]
    final = await asyncio.to_thread(control.topology.read_map)
    assert sorted(final.counts()) == [1365, 1365, 1366]
    await eventually(lambda: control.map == final, timeout=10, what="the map's watch")
    where = placed(dsns)
    assert set(where) == loaded["ids"]  # nothing lost, nothing made up
    doubled = {j: s for j, s in where.items() if len(s) != 1}
    assert not doubled
    misplaced = [j for j, s in where.items() if s[0] != final.shard_of(j)]
    assert not misplaced
    assert any(s == [2] for s in where.values())  # the new shard holds some
    # RUNNING rows moved with their attempt (the fencing token).
    attempts = {
        jid: attempt for jid, status_, attempt in rows(dsns, MOVABLE) if status_ == "RUNNING"
    }
    assert attempts == loaded["running"]
    # A key's repeat finds its job where the map routes it now.
    keyed = rows(dsns, "SELECT owner_service, idempotency_key, job_id FROM job_keys")
    assert len(keyed) == len({(o, k) for o, k, _ in keyed}) == 200
    for owner, key, jid in keyed[:20]:
        again = job_params("http://127.0.0.1:9/x", key=key, owner=owner)
        result = await store.create_job(final.shard_of(again.id), again)
        assert not result.created and result.job.id == jid


async def test_drain_moves_every_slot_off_a_shard(
    store: PgStore, shard_dsns: list[str], new_dsn: str, control: ReshardControl
) -> None:
    loaded = await load(store, 300)
    await control.add(new_dsn)
    await control.request("rebalance")
    await wait_done(control)
    await control.request("drain", 0)
    status = await wait_done(control)
    assert status["move"]["state"] == "done"
    assert status["shards"][0]["slots"] == 0 and status["shards"][0]["retired"]
    assert all(s["rows"] is not None for s in status["shards"])
    # What `--wait` polls: the same map and move, without a count of every table.
    light = await control.status(rows=False)
    assert all(s["rows"] is None for s in light["shards"])
    assert (light["epoch"], light["move"]) == (status["epoch"], status["move"])
    dsns = [*shard_dsns, new_dsn]
    where = placed(dsns)
    assert set(where) == loaded["ids"]
    assert all(len(s) == 1 and s[0] != 0 for s in where.values())
    # This process routes by the newest map once its watch has fired.
    await eventually(lambda: control.map.counts()[0] == 0, timeout=10, what="the map's watch")
    # A rebalance leaves the drained shard empty.
    await control.request("rebalance")
    status = await wait_done(control)
    assert [s["slots"] for s in status["shards"]] == [0, 2048, 2048]


class Killed(BaseException):
    """The mover 'dies' here: nothing after this point of the step ran."""


class DiesAfter(PgSlotMoves):
    """The store seam, failing once after the ``n``-th operation."""

    def __init__(self, store: PgStore, n: int) -> None:
        super().__init__(store)
        self.left = n

    def _tick(self) -> None:
        self.left -= 1
        if self.left == 0:
            raise Killed

    async def copy_slots(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        out = await super().copy_slots(*args, **kwargs)
        self._tick()
        return out

    async def fence_slots(self, *args: Any, **kwargs: Any) -> None:
        await super().fence_slots(*args, **kwargs)
        self._tick()

    async def unfence_slots(self, *args: Any, **kwargs: Any) -> None:
        await super().unfence_slots(*args, **kwargs)
        self._tick()

    async def delete_slots(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        out = await super().delete_slots(*args, **kwargs)
        self._tick()
        return out


@pytest.fixture
async def grown(
    store: PgStore, shard_dsns: list[str], new_dsn: str, zk_connect: str
) -> AsyncIterator[tuple[ZkTopology, ReshardControl, dict[str, Any]]]:
    """Loaded shards, a topology and a control (running no mover) that added
    ``new_dsn`` and recorded a rebalance: the tests run the mover themselves."""
    loaded = await load(store, 200)
    topology = ZkTopology(zk_connect, shard_dsns)
    await asyncio.to_thread(topology.start)
    try:
        control = ReshardControl(topology, store, PgSlotMoves(store), settings=FAST)
        await control.add(new_dsn)
        await control.request("rebalance")
        yield topology, control, loaded
    finally:
        await asyncio.to_thread(topology.stop)


@pytest.mark.parametrize("dies_after", [1, 2, 3, 4, 5, 6, 9])
async def test_a_mover_killed_between_any_two_steps_is_resumed(
    store: PgStore,
    shard_dsns: list[str],
    new_dsn: str,
    dies_after: int,
    grown: tuple[ZkTopology, ReshardControl, dict[str, Any]],
) -> None:
    topology, _, loaded = grown
    stopping = asyncio.Event()
    settings = MoverSettings(batch_slots=256, barrier_timeout=5.0, postpone_seconds=0.1)
    # The mover's 'process' dies mid-step: its exception escapes run().
    with pytest.raises(Killed):
        await SlotMover(topology, DiesAfter(store, dies_after), settings).run(stopping)
    record = await SlotMover(topology, PgSlotMoves(store), settings).run(stopping)
    assert record is not None and record.state == "done"
    final = await asyncio.to_thread(topology.read_map)
    where = placed([*shard_dsns, new_dsn])
    assert set(where) == loaded["ids"]
    assert all(len(s) == 1 and s[0] == final.shard_of(j) for j, s in where.items())


async def test_cancel_rolls_back_the_batch_not_yet_flipped(
    store: PgStore,
    shard_dsns: list[str],
    new_dsn: str,
    grown: tuple[ZkTopology, ReshardControl, dict[str, Any]],
) -> None:
    topology, control, loaded = grown
    # Kill it after the copy (fence, copy), then cancel, then resume.
    with pytest.raises(Killed):
        await SlotMover(topology, DiesAfter(store, 2), FAST).run(asyncio.Event())
    await control.cancel()
    with pytest.raises(Conflict):  # one move at a time, even while it is cancelled
        await control.request("rebalance")
    record = await SlotMover(topology, PgSlotMoves(store), FAST).run(asyncio.Event())
    assert record is not None and record.state == "cancelled"
    assert (await asyncio.to_thread(topology.read_map)).counts()[2] == 0
    where = placed([*shard_dsns, new_dsn])
    assert set(where) == loaded["ids"]
    assert all(s == [shardmap.SlotMap.modulo(2).shard_of(j)] for j, s in where.items())
    assert not await PgSlotMoves(store).fenced_slots(0)  # shard 0 serves its slots again


def test_move_record_round_trips() -> None:
    record = MoveRecord.new("drain", 1, 100, 1.0)
    assert MoveRecord.from_json(record.to_json()) == record
