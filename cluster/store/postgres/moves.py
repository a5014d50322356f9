"""Moving slots between PostgreSQL shards: the fence, the barrier after it,
the copy and the clean (:class:`~cluster.store.contracts.moves.SlotMoves`).

The copy streams a batch's rows as binary COPY from the source, read by
the move's slot index, straight into the target's tables, in one
transaction on the target that also fences the slots 'copied' there
(migration 22): no row is decoded in Python, a copy cut short leaves
nothing behind, and a copy run again after its commit finds the fence and
has nothing to do. The slots' rows do not change while they are fenced on
the source, since nothing writes them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from psycopg import sql
from psycopg.rows import scalar_row, tuple_row

from cluster.errors import InvalidRequest
from cluster.store.contracts.moves import FENCE_STATES, MOVABLE_TABLES
from cluster.store.pgshards import PgShards, translate_errors, wrap_exceptions
from cluster.store.sql import QUERIES
from shardmap import SLOTS

__all__ = ["PgSlotMoves"]

# A moved RUNNING job's lease lasts at least this long on its new shard: its
# holder could not renew it while the slot was fenced (the mover may have been
# down between two steps), and must get to write its outcome there before the
# new owner's reaper runs the job again.
RUNNING_GRACE_SECONDS = 60.0

# The move's slot indexes, one per movable table (index_slots), and the column
# whose slot a row has where it is not its id.
_INDEX_PREFIX = "vakit_move_slot_"
_SLOT_COLUMN = {"job_keys": "job_id", "cron_occurrences": "cron_id"}

# How often the barrier looks again at the transactions it waits for.
_BARRIER_POLL = 0.02




def _slots(slots: Sequence[int]) -> list[int]:
    out = sorted(set(slots))
    if out and not (0 <= out[0] and out[-1] < SLOTS):
        raise InvalidRequest(f"slots must be in 0..{SLOTS - 1}")
    return out



class PgSlotMoves:
    """:class:`~cluster.store.contracts.moves.SlotMoves` on the pools of
    :class:`PgShards` (one error translation, one statement metric)."""

    def __init__(self, shards: PgShards) -> None:
        self.shards = shards
        # Shards whose movable tables this process indexed by slot (index_slots).
        self._indexed: dict[int, bool] = {}

    @property
    def shard_count(self) -> int:
        return self.shards.shard_count

    @wrap_exceptions
    async def fence_slots(self, shard: int, slots: Sequence[int], state: str) -> None:
        if state not in FENCE_STATES:
            raise InvalidRequest(f"a fence is one of {FENCE_STATES}, not {state!r}")
        await self.shards.fetch(shard, "fence_slots", {"slots": _slots(slots), "state": state})

    @wrap_exceptions
    async def unfence_slots(self, shard: int, slots: Sequence[int]) -> None:
        await self.shards.fetch(shard, "unfence_slots", {"slots": _slots(slots)})

    @wrap_exceptions
    async def fenced_slots(self, shard: int) -> dict[int, str]:
        rows = await self.shards.fetch_as(shard, "fenced_slots", {}, tuple_row)
        return {int(slot): state for slot, state in rows}

    @wrap_exceptions
    async def wait_for_older_transactions(self, shard: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = await self.shards.fetch_as(shard, "older_transactions", {}, scalar_row)
        while waiting:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"shard {shard}: {len(waiting)} transactions older than the fence "
                    f"still open after {timeout:.1f} s"
                )
            await asyncio.sleep(_BARRIER_POLL)
            waiting = await self.shards.fetch_as(
                shard, "transactions_running", {"vxids": waiting}, scalar_row
            )

    @wrap_exceptions
    async def copy_slots(self, source: int, target: int, slots: Sequence[int]) -> dict[str, int]:
        if source == target:
            raise InvalidRequest("a slot moves to another shard")
        wanted = _slots(slots)
        copied = dict.fromkeys(MOVABLE_TABLES, 0)
        if not wanted:
            return copied
        await self._by_index(source)
        # One transaction on the target: the rows, the RUNNING jobs' grace
        # and the 'copied' fence commit together, or none of them does. A
        # second copy of the same slots (a mover that lost its lock and woke
        # up) fails on the rows' unique keys, never doubles one.
        async with (
            self.shards.connection(target) as dst,
            dst.transaction(),
            self.shards.connection(source) as src,
        ):
            cur = await dst.execute(QUERIES["slot_copied"], {"slots": wanted})
            row = await cur.fetchone()
            done = int(row[0]) if row else 0
            if done == len(wanted):
                return copied  # copied before: a crash after the commit
            if done:
                raise RuntimeError(
                    f"shard {target}: {done} of {len(wanted)} slots were copied already "
                    "by another batch; the move record and the shard disagree"
                )
            for table in MOVABLE_TABLES:
                copied[table] = await self._copy_table(src, dst, source, table, wanted)
            grace = {"grace": RUNNING_GRACE_SECONDS, "slots": wanted}
            await dst.execute(QUERIES["slot_running_grace"], grace)
            await dst.execute(QUERIES["fence_slots"], {"slots": wanted, "state": "copied"})
        return copied

    async def _copy_table(
        self, src: Any, dst: Any, source: int, table: str, slots: list[int]
    ) -> int:
        """The slots' rows of ``table``: binary COPY out of ``source`` (read
        by the slot index) straight into ``dst``'s table, in its transaction."""
        rows_out = sql.SQL("COPY ({}) TO STDOUT (FORMAT BINARY)").format(
            sql.SQL(QUERIES[f"slot_rows_{table}"])
        )
        rows_in = sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(sql.Identifier(table))
        args = {"slots": slots}
        async with src.cursor() as out_cur, dst.cursor() as in_cur:
            # An error of the source's side is the source's, not the target's.
            with translate_errors(source):
                async with out_cur.copy(rows_out, args) as out, in_cur.copy(rows_in) as into:
                    async for chunk in out:
                        await into.write(chunk)
            return max(int(out_cur.rowcount), 0)

    @wrap_exceptions
    async def discard_copy(self, shard: int, slots: Sequence[int]) -> dict[str, int]:
        wanted = _slots(slots)
        deleted = dict.fromkeys(MOVABLE_TABLES, 0)
        if not wanted:
            return deleted
        # The rows and the 'copied' fence go together (migration 22): a
        # shard holds a slot's rows only while it serves it or has it copied.
        async with self.shards.connection(shard) as conn, conn.transaction():
            await self._delete_rows(conn, wanted, deleted)
            await conn.execute(QUERIES["fence_slots"], {"slots": wanted, "state": "absent"})
        return deleted

    async def _delete_rows(self, conn: Any, slots: list[int], deleted: dict[str, int]) -> None:
        # A job goes before its key, as it would finish.
        for table in reversed(MOVABLE_TABLES):
            cur = await conn.execute(QUERIES[f"slot_delete_{table}"], {"slots": slots})
            deleted[table] += cur.rowcount

    @wrap_exceptions
    async def delete_slots(self, shard: int, slots: Sequence[int]) -> dict[str, int]:
        wanted = _slots(slots)
        deleted = dict.fromkeys(MOVABLE_TABLES, 0)
        if not wanted:
            return deleted
        await self._by_index(shard)
        # The slots are absent here by now, and nothing serves them: the
        # five tables in one transaction (one commit), read by the index.
        async with self.shards.connection(shard) as conn, conn.transaction():
            await self._delete_rows(conn, wanted, deleted)
        return deleted

    @wrap_exceptions
    async def slot_rows(self, shard: int, slots: Sequence[int] | None = None) -> dict[str, int]:
        args = {"all": slots is None, "slots": _slots(slots) if slots is not None else []}
        [row] = await self.shards.fetch(shard, "slot_row_counts", args)
        return {table: int(row[table]) for table in MOVABLE_TABLES}

    @wrap_exceptions
    async def index_slots(self, shard: int, present: bool) -> None:
        rows = await self.shards.fetch_as(shard, "slot_index_state", {}, tuple_row)
        state = {str(name): bool(valid) for name, valid in rows}
        for table in MOVABLE_TABLES:
            name = _INDEX_PREFIX + table
            if name in state and (not present or not state[name]):
                await self._ddl(
                    shard,
                    sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)),
                )
            if present and not state.get(name):
                column = _SLOT_COLUMN.get(table, "id")
                await self._ddl(
                    shard,
                    sql.SQL(
                        "CREATE INDEX CONCURRENTLY IF NOT EXISTS {} ON {} (vakit_slot({}))"
                    ).format(sql.Identifier(name), sql.Identifier(table), sql.Identifier(column)),
                )
        self._indexed[shard] = present

    async def _by_index(self, shard: int) -> None:
        """The move's slot index on a shard giving slots away: built at the
        fence; a mover resumed in another process reads its state once."""
        if not self._indexed.get(shard):
            await self.index_slots(shard, True)

    async def _ddl(self, shard: int, statement: sql.Composed) -> None:
        # Outside any transaction (CONCURRENTLY), and with no statement
        # timeout: building an index reads the whole table.
        async with self.shards.connection(shard) as conn:
            await conn.execute("SET statement_timeout = 0")
            try:
                await conn.execute(statement)
            finally:
                await conn.execute("RESET statement_timeout")

    @wrap_exceptions
    async def due_within(self, shard: int, slots: Sequence[int], seconds: float) -> int:
        args = {"slots": _slots(slots), "seconds": float(seconds)}
        [due] = await self.shards.fetch_as(shard, "slot_due_within", args, scalar_row)
        return int(due)
