"""Moving slots between PostgreSQL shards: the fence, the barrier after it,
the copy and the clean (:class:`~cluster.store.contracts.moves.SlotMoves`).

The copy streams each batch as binary COPY from the source into a staging
table of the target's transaction and merges it with ``ON CONFLICT DO
NOTHING`` (migration 21): no row is decoded in Python, and a copy cut
short is simply run again. A batch is a range of the source table's pages
(a TID range scan), so a table is read once, in order, however many
batches and whatever share of it the slots hold; the slots' rows do not
move while they are fenced, since nothing writes them.
"""

from __future__ import annotations

import asyncio
import math
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

# A batch reads at most this many pages (64 MB of 8 kB pages): well within
# a statement's timeout on a table whose statistics are off.
_MOST_PAGES = 8192

# Rows a page holds when the table was never analyzed (a job is ~1 kB).
_ROWS_PER_PAGE = 8.0


def _slots(slots: Sequence[int]) -> list[int]:
    out = sorted(set(slots))
    if out and not (0 <= out[0] and out[-1] < SLOTS):
        raise InvalidRequest(f"slots must be in 0..{SLOTS - 1}")
    return out


def _tid(page: int) -> str:
    return f"({page},0)"


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

    async def _ranges(
        self, shard: int, table: str, slots: int, batch: int
    ) -> list[tuple[int, int]]:
        """The page ranges of ``table`` on ``shard``, each holding about
        ``batch`` rows of ``slots`` of the 4,096 slots; one range of the
        whole table when the move's slot index is there (the statement reads
        the slots' rows by the index, not the pages)."""
        [(pages, per_page)] = await self.shards.fetch_as(
            shard, "table_pages", {"table": table}, tuple_row
        )
        if self._indexed.get(shard):
            return [(0, int(pages) + 1)]
        rows_per_page = float(per_page) if per_page else _ROWS_PER_PAGE
        share = max(slots, 1) / SLOTS
        step = max(1, min(_MOST_PAGES, math.ceil(batch / (rows_per_page * share))))
        return [(lo, min(lo + step, pages)) for lo in range(0, int(pages), step)]

    @wrap_exceptions
    async def copy_slots(
        self, source: int, target: int, slots: Sequence[int], *, batch: int = 5000
    ) -> dict[str, int]:
        if source == target:
            raise InvalidRequest("a slot moves to another shard")
        wanted = _slots(slots)
        copied = dict.fromkeys(MOVABLE_TABLES, 0)
        if not wanted:
            return copied
        ranges = {t: await self._ranges(source, t, len(wanted), batch) for t in MOVABLE_TABLES}
        grace = {"grace": RUNNING_GRACE_SECONDS, "slots": wanted}
        if self._indexed.get(source):
            # Read by the slot index: one range a table, all in one
            # transaction on the target (one commit a batch, not five).
            async with (
                self.shards.connection(target) as dst,
                dst.transaction(),
                self.shards.connection(source) as src,
            ):
                for table in MOVABLE_TABLES:
                    for lo, hi in ranges[table]:
                        args = {"lo": _tid(lo), "hi": _tid(hi), "slots": wanted}
                        copied[table] += await self._copy_range(src, dst, source, table, args)
                await dst.execute(QUERIES["slot_running_grace"], grace)
            return copied
        for table in MOVABLE_TABLES:
            for lo, hi in ranges[table]:
                args = {"lo": _tid(lo), "hi": _tid(hi), "slots": wanted}
                async with (
                    self.shards.connection(target) as dst,
                    dst.transaction(),
                    self.shards.connection(source) as src,
                ):
                    copied[table] += await self._copy_range(src, dst, source, table, args)
        async with self.shards.connection(target) as dst:
            await dst.execute(QUERIES["slot_running_grace"], grace)
        return copied

    async def _copy_range(
        self, src: Any, dst: Any, source: int, table: str, args: dict[str, Any]
    ) -> int:
        """One page range of ``table``: COPY out of ``source`` into a staging
        table of ``dst``'s transaction, merged there."""
        rows_out = sql.SQL("COPY ({}) TO STDOUT (FORMAT BINARY)").format(
            sql.SQL(QUERIES[f"slot_rows_{table}"])
        )
        cur = await dst.execute(QUERIES["slot_stage"], {"table": table})
        staged = await cur.fetchone()
        assert staged is not None
        rows_in = sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(sql.Identifier(staged[0]))
        async with src.cursor() as out_cur, dst.cursor() as in_cur:
            # An error of the source's side is the source's, not the target's.
            with translate_errors(source):
                async with out_cur.copy(rows_out, args) as out, in_cur.copy(rows_in) as into:
                    async for chunk in out:
                        await into.write(chunk)
        cur = await dst.execute(QUERIES["slot_merge"], {"table": table})
        merged = await cur.fetchone()
        assert merged is not None
        return int(merged[0])

    @wrap_exceptions
    async def delete_slots(
        self, shard: int, slots: Sequence[int], *, batch: int = 5000
    ) -> dict[str, int]:
        wanted = _slots(slots)
        deleted = dict.fromkeys(MOVABLE_TABLES, 0)
        if not wanted:
            return deleted
        # Any order would do: the slots are absent here by now, and nothing
        # serves them. A job goes before its key, as it would finish.
        if self._indexed.get(shard):
            # By the slot index: the five tables in one transaction (one commit).
            async with self.shards.connection(shard) as conn, conn.transaction():
                for table in reversed(MOVABLE_TABLES):
                    args = {"lo": _tid(0), "hi": _tid(2**31 - 1), "slots": wanted}
                    cur = await conn.execute(QUERIES[f"slot_delete_{table}"], args)
                    deleted[table] += cur.rowcount
            return deleted
        for table in reversed(MOVABLE_TABLES):
            for lo, hi in await self._ranges(shard, table, len(wanted), batch):
                args = {"lo": _tid(lo), "hi": _tid(hi), "slots": wanted}
                async with self.shards.connection(shard) as conn:
                    cur = await conn.execute(QUERIES[f"slot_delete_{table}"], args)
                    deleted[table] += cur.rowcount
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
