"""The mover: slots from shard to shard, a batch at a time, crash-safe.

A batch of slots S moves from shard A to shard B in four steps, each recorded
in the ledger before the next begins (docs/design/resharding.md):

1. **fence**: S is fenced ``moving`` on A, then the mover waits until every
   transaction on A that began before the fence has ended. From then on no
   write for S commits on A (the fence is checked inside each write).
2. **copy**: S's movable rows are copied from A to B, idempotently. B does
   not serve S yet: it never held S, or it fenced S when it gave it away.
3. **flip**: S is unfenced on B, the map's next epoch names B, and S is
   fenced ``absent`` on A. A is fenced before B is unfenced: at no instant do
   both serve S.
4. **clean**: S's copied rows are deleted from A (its history stays).

A mover killed at any step leaves S served by nobody (a 503 with
``Retry-After``) until a mover runs again and resumes at the recorded step.
Before **flip** a batch can be rolled back (cancel, or a barrier that timed
out): B's copies are deleted and A unfenced.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cluster import metrics
from cluster.errors import Conflict
from cluster.resharding.ledger import Batch, MoveLedger, MoveRecord
from shardmap import Move, SlotMap, plan_moves

if TYPE_CHECKING:
    from cluster.store.contracts.moves import SlotMoves

__all__ = ["MoverSettings", "SlotMover", "active_shards", "next_batch"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MoverSettings:
    batch_slots: int = 64  # slots a batch: its rows are unwritable for one batch's copy
    barrier_timeout: float = 10.0  # seconds to wait for older transactions on the source
    wave_window: float = 60.0  # a batch is postponed if, within this many seconds,
    wave_threshold: int = 5000  # more than this many of its jobs are due
    postpone_seconds: float = 5.0


def active_shards(
    current: SlotMap, kind: str, drain: int | None, retired: frozenset[int]
) -> list[int]:
    """The shards a plan spreads the slots over: all registered but the retired
    ones (and the one being drained)."""
    out = set(range(current.shard_count)) - retired
    if kind == "drain" and drain is not None:
        out.discard(drain)
    return sorted(out)


def next_batch(current: SlotMap, active: list[int], size: int) -> Batch | None:
    """The plan's first moves with one source and one target, at most ``size``."""
    plan = plan_moves(current, active)
    if not plan:
        return None
    first = plan[0]
    slots = [m.slot for m in plan if m.source == first.source and m.target == first.target][:size]
    return Batch(tuple(slots), first.source, first.target)


class SlotMover:
    """Runs the ledger's move to its end (or until ``stopping``)."""

    def __init__(
        self,
        ledger: MoveLedger,
        moves: SlotMoves,
        settings: MoverSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
        holds_lock: Callable[[], bool] = lambda: True,
    ) -> None:
        self.ledger = ledger
        # Checked before every step: a mover whose ZooKeeper session was lost
        # (its lock with it) stops before touching a shard again.
        self.holds_lock = holds_lock
        self.moves = moves
        self.settings = settings or MoverSettings()
        self.clock = clock
        self._version = -1

    async def _read(self) -> MoveRecord | None:
        body, version = await asyncio.to_thread(self.ledger.read_move)
        self._version = version
        return MoveRecord.from_json(body) if body else None

    async def _write(self, record: MoveRecord) -> MoveRecord:
        record = replace(record, updated_at=self.clock())
        self._version = await asyncio.to_thread(
            self.ledger.write_move, record.to_json(), self._version
        )
        return record

    async def run(self, stopping: asyncio.Event) -> MoveRecord | None:
        """Resume the recorded move and run it to done, cancelled or failed.
        Raises :class:`Conflict` if another mover rewrote the record."""
        record = await self._read()
        while record is not None and record.active and not stopping.is_set():
            try:
                record = await self._pass(record)
            except Conflict:
                raise
            except Exception as exc:
                # A shard down, a statement timeout: the step is retried, as
                # every step may be.
                log.warning("move %s: %s; retrying the step", record.id, exc)
                record = await self._write(replace(record, note=f"retrying: {exc}"))
                await self._sleep(stopping, self.settings.postpone_seconds)
        return record

    async def _pass(self, record: MoveRecord) -> MoveRecord:
        if not self.holds_lock():
            raise Conflict("this mover lost its lock; another mover may run")
        batch = record.batch
        if batch is not None and batch.step in ("fence", "copy") and await self._flipped(batch):
            # The flip happened but its record was not written (a crash, or
            # a cancel that rewrote the record meanwhile): never roll back
            # past it, go on to the clean-up.
            batch = batch.at("clean")
            record = await self._write(replace(record, batch=batch))
        if record.state == "cancelling":
            if batch is not None and batch.step in ("fence", "copy"):
                await self._roll_back(batch)
                batch = None
            if batch is None:
                await self._drop_indexes()
                return await self._write(replace(record, state="cancelled", batch=None, note=None))
        step = "plan" if batch is None else batch.step
        started = time.monotonic()
        try:
            if batch is None:
                return await self._plan(record)
            if batch.step == "fence":
                return await self._fence(record, batch)
            if batch.step == "copy":
                return await self._copy(record, batch)
            if batch.step == "flip":
                return await self._flip(record, batch)
            return await self._clean(record, batch)
        finally:
            metrics.RESHARD_STEP_SECONDS.labels(step).observe(time.monotonic() - started)

    async def _plan(self, record: MoveRecord) -> MoveRecord:
        current = await asyncio.to_thread(self.ledger.read_map)
        retired = await asyncio.to_thread(self.ledger.retired)
        active = active_shards(current, record.kind, record.drain, retired)
        batch = next_batch(current, active, self.settings.batch_slots)
        if batch is None:
            await self._drop_indexes()
            log.info(
                "move %s done: %s slots, %s rows", record.id, record.slots_done, record.rows_copied
            )
            return await self._write(replace(record, state="done", note=None))
        due = await self.moves.due_within(batch.source, batch.slots, self.settings.wave_window)
        if due > self.settings.wave_threshold:
            note = (
                f"postponed: {due} jobs of the next slots are due within "
                f"{self.settings.wave_window:g} s (threshold {self.settings.wave_threshold})"
            )
            record = await self._write(replace(record, note=note))
            await asyncio.sleep(self.settings.postpone_seconds)
            return record
        return await self._write(replace(record, batch=batch, note=None))

    async def _fence(self, record: MoveRecord, batch: Batch) -> MoveRecord:
        # Built once a move on each shard giving slots away (a catalog read
        # after that): the copy and the clean-up read the slots' rows by it.
        await self.moves.index_slots(batch.source, True)
        await self.moves.fence_slots(batch.source, batch.slots, "moving")
        try:
            await self.moves.wait_for_older_transactions(
                batch.source, self.settings.barrier_timeout
            )
        except TimeoutError:
            if not self.holds_lock() or await self._flipped(batch):
                raise Conflict("this mover lost its lock; another mover may run") from None
            await self.moves.unfence_slots(batch.source, batch.slots)
            note = f"postponed: a transaction on shard {batch.source} outlived the fence's barrier"
            return await self._write(replace(record, batch=None, note=note))
        return await self._write(replace(record, batch=batch.at("copy")))

    async def _copy(self, record: MoveRecord, batch: Batch) -> MoveRecord:
        started = time.monotonic()
        copied = await self.moves.copy_slots(batch.source, batch.target, batch.slots)
        seconds = time.monotonic() - started
        rows = sum(copied.values())
        metrics.RESHARD_ROWS.inc(rows)
        tables = dict(record.tables)
        for table, n in copied.items():
            tables[table] = tables.get(table, 0) + n
        return await self._write(
            replace(
                record,
                batch=batch.at("flip"),
                rows_copied=record.rows_copied + rows,
                copy_seconds=record.copy_seconds + seconds,
                tables=tables,
            )
        )

    async def _flip(self, record: MoveRecord, batch: Batch) -> MoveRecord:
        await self.moves.unfence_slots(batch.target, batch.slots)
        current = await asyncio.to_thread(self.ledger.read_map)
        moving = [
            Move(s, batch.source, batch.target)
            for s in batch.slots
            if current.owners[s] == batch.source
        ]
        strays = [s for s in batch.slots if current.owners[s] not in (batch.source, batch.target)]
        if strays:
            raise RuntimeError(
                f"slots {strays} belong to neither shard {batch.source} nor {batch.target}"
            )
        if moving:
            flipped = await asyncio.to_thread(
                self.ledger.replace_map, current.epoch, current.with_moves(moving)
            )
            metrics.SLOT_MAP_EPOCH.set(flipped.epoch)
        await self.moves.fence_slots(batch.source, batch.slots, "absent")
        return await self._write(replace(record, batch=batch.at("clean")))

    async def _clean(self, record: MoveRecord, batch: Batch) -> MoveRecord:
        await self.moves.delete_slots(batch.source, batch.slots)
        metrics.RESHARD_SLOTS.inc(len(batch.slots))
        return await self._write(
            replace(
                record,
                batch=None,
                slots_done=record.slots_done + len(batch.slots),
                batches=record.batches + 1,
            )
        )

    async def _drop_indexes(self) -> None:
        """The move's slot indexes cost every write: gone once it ends."""
        for shard in range(self.moves.shard_count):
            await self.moves.index_slots(shard, False)

    async def _flipped(self, batch: Batch) -> bool:
        current = await asyncio.to_thread(self.ledger.read_map)
        return any(current.owners[s] == batch.target for s in batch.slots)

    async def _roll_back(self, batch: Batch) -> None:
        """Undo a batch before its flip: B's copies go, A serves S again."""
        await self.moves.discard_copy(batch.target, batch.slots)
        await self.moves.unfence_slots(batch.source, batch.slots)

    @staticmethod
    async def _sleep(stopping: asyncio.Event, seconds: float) -> None:
        try:
            await asyncio.wait_for(stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass
