"""Resharding in one process: follow the topology, run the mover, answer the operator.

Every process (API and worker) follows the topology ZooKeeper holds: a shard
added to the list gets a pool here, a newer slot map becomes the one this
process routes by. An API process also answers the operator calls (add,
rebalance, drain, cancel, status) and runs the mover when a move is recorded
and it wins the mover lock; a mover killed with its process is resumed by the
next API process to take the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from cluster import metrics
from cluster.coordination.topology import Topology, ZkTopology
from cluster.errors import Conflict, InvalidRequest, VakitError
from cluster.resharding.grow import add_shard
from cluster.resharding.ledger import MoveRecord
from cluster.resharding.mover import MoverSettings, SlotMover, active_shards
from cluster.store.dsn import mask_dsn
from shardmap import SlotMap, plan_moves

if TYPE_CHECKING:
    from cluster.store.contracts.moves import SlotMoves

__all__ = ["GrowableStore", "ReshardControl"]

log = logging.getLogger(__name__)


class GrowableStore(Protocol):
    @property
    def shard_count(self) -> int: ...

    async def add_shard(self, dsn: str) -> int: ...


class ReshardControl:
    """One process's part in resharding (see the module doc)."""

    def __init__(
        self,
        topology: ZkTopology,
        store: GrowableStore,
        moves: SlotMoves,
        *,
        settings: MoverSettings | None = None,
        run_mover: bool = False,
        on_grow: Callable[[int], Awaitable[None]] | None = None,
        on_map: Callable[[SlotMap], None] | None = None,
    ) -> None:
        self.topology = topology
        self.store = store
        self.moves = moves
        self.settings = settings or MoverSettings()
        self.run_mover = run_mover
        self.on_grow = on_grow
        self.on_map = on_map
        self.map = SlotMap.modulo(store.shard_count)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._applying = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self.identity = f"{socket.gethostname()}:{os.getpid()}"

    # -- following the topology ----------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.topology.start)
        await self._apply(await asyncio.to_thread(self.topology.current))
        await asyncio.to_thread(self.topology.watch, self._changed)
        if self.run_mover:
            self._tasks.append(asyncio.create_task(self._mover_loop()))

    async def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.to_thread(self.topology.stop)

    def _changed(self, topology: Topology) -> None:
        """From kazoo's thread: apply on the event loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            asyncio.run_coroutine_threadsafe(self._apply(topology), loop)

    async def _apply(self, topology: Topology) -> None:
        async with self._applying:
            for dsn in topology.dsns[self.store.shard_count :]:
                shard = await self.store.add_shard(dsn)
                log.info("shard %s joined: %s", shard, mask_dsn(dsn))
                if self.on_grow is not None:
                    await self.on_grow(self.store.shard_count)
            seen = topology.slots
            # A map naming a shard this process has no pool for yet waits for
            # the shard list's own watch (the list is written first).
            if seen.epoch >= self.map.epoch and seen.shard_count <= self.store.shard_count:
                self.map = seen
                metrics.SLOT_MAP_EPOCH.set(seen.epoch)
                if self.on_map is not None:
                    self.on_map(seen)

    # -- the operator's calls ---------------------------------------------

    async def add(self, dsn: str) -> dict[str, Any]:
        if not dsn.strip():
            raise InvalidRequest("a shard's DSN is required")
        shard = await add_shard(self.topology, dsn.strip())
        await self._apply(await asyncio.to_thread(self.topology.current))
        return {"shard": shard, "dsn": mask_dsn(dsn), "epoch": self.map.epoch}

    async def request(self, kind: str, drain: int | None = None) -> dict[str, Any]:
        current = await asyncio.to_thread(self.topology.read_map)
        if kind == "drain":
            if drain is None or not 0 <= drain < current.shard_count:
                raise InvalidRequest(
                    f"shard {drain} is not registered (0..{current.shard_count - 1})"
                )
        body, version = await asyncio.to_thread(self.topology.read_move)
        if body is not None and MoveRecord.from_json(body).active:
            raise Conflict("a move is under way; wait for it or cancel it", move=body["id"])
        retired = await asyncio.to_thread(self.topology.retired)
        if kind == "drain" and drain is not None:
            if not active_shards(current, kind, drain, retired):
                raise InvalidRequest("draining it would leave no shard to hold the slots")
            await asyncio.to_thread(self.topology.set_retired, drain, True)
            retired = retired | {drain}
        planned = len(plan_moves(current, active_shards(current, kind, drain, retired)))
        record = MoveRecord.new(kind, drain, planned, time.time())
        await asyncio.to_thread(self.topology.write_move, record.to_json(), version)
        self._wake.set()
        return record.summary()

    async def cancel(self) -> dict[str, Any]:
        body, version = await asyncio.to_thread(self.topology.read_move)
        if body is None or not MoveRecord.from_json(body).active:
            raise Conflict("no move is under way")
        record = replace(MoveRecord.from_json(body), state="cancelling")
        await asyncio.to_thread(self.topology.write_move, record.to_json(), version)
        return record.summary()

    async def status(self, rows: bool = True) -> dict[str, Any]:
        """``rows``: count each shard's movable rows too (a read of every
        table; a caller following a move every second leaves it out)."""
        current = await asyncio.to_thread(self.topology.read_map)
        dsns = await asyncio.to_thread(self.topology.shard_dsns)
        retired = await asyncio.to_thread(self.topology.retired)
        body, _ = await asyncio.to_thread(self.topology.read_move)
        counts = current.counts() + [0] * max(0, len(dsns) - current.shard_count)
        shards: list[dict[str, Any]] = []
        for shard, dsn in enumerate(dsns):
            entry: dict[str, Any] = {
                "shard": shard,
                "dsn": mask_dsn(dsn),
                "slots": counts[shard] if shard < len(counts) else 0,
                "retired": shard in retired,
            }
            try:
                entry["rows"] = (
                    await self.moves.slot_rows(shard)
                    if rows and shard < self.store.shard_count
                    else None
                )
            except VakitError as exc:
                entry["rows"] = None
                entry["error"] = exc.message
            shards.append(entry)
        return {
            "epoch": current.epoch,
            "shardCount": current.shard_count,
            # The map itself, as runs of slots with one owner: [first, last, shard].
            "runs": [list(run) for run in current.runs()],
            "shards": shards,
            "move": MoveRecord.from_json(body).summary() if body else None,
        }

    # -- the mover -----------------------------------------------------------

    async def _mover_loop(self) -> None:
        """Wait for a recorded move, take the cluster's mover lock, run it."""
        lock = self.topology.mover_lock(self.identity)
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=2.0)
            self._wake.clear()
            try:
                body, _ = await asyncio.to_thread(self.topology.read_move)
                if body is None or not MoveRecord.from_json(body).active:
                    continue
                if not await asyncio.to_thread(self.topology.try_lock, lock, 0.5):
                    continue
                try:
                    holds = self.topology.holds(lock)
                    await SlotMover(self.topology, self.moves, self.settings, holds_lock=holds).run(
                        self._stopping
                    )
                finally:
                    await asyncio.to_thread(lock.release)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the mover stopped; retrying")
                await asyncio.sleep(1.0)
