"""The leader loops' contract on PostgreSQL: reaper, mover, janitor, backlog."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from cluster.model import (
    BacklogParams,
    BacklogStats,
    MaintainHistoryParams,
    MaintenanceResult,
    MoveFarParams,
    ReapParams,
    ReapResult,
)
from cluster.store.pgshards import PgShards, wrap_exceptions
from cluster.store.sql import QUERIES

__all__ = ["BACKLOG_CAP", "PgUpkeep"]

BACKLOG_CAP = 1_000_000

# The janitor's advisory lock on a shard (history_lock); any constant that
# no other lock of ours uses ("VAKIT" is the migrations').
_HISTORY_LOCK_KEY = 0x56414B4954_4A


class PgUpkeep(PgShards):
    """:class:`~cluster.store.contracts.upkeep.JobUpkeep` on PostgreSQL shards."""

    @wrap_exceptions
    async def reap_expired(self, shard: int, params: ReapParams) -> ReapResult:
        rows = await self.fetch(shard, "reap_expired", {"limit": params.limit, "now": params.now})
        row = rows[0]
        return ReapResult(
            rescheduled=row["rescheduled"],
            failed=row["failed"],
            failed_by=tuple(sorted((o, k, int(n)) for o, k, n in row["failed_by"])),
        )

    @wrap_exceptions
    async def move_far_jobs(self, shard: int, params: MoveFarParams) -> int:
        rows = await self.fetch(
            shard,
            "move_far_jobs",
            {"horizon": params.horizon_seconds, "limit": params.limit, "now": params.now},
        )
        return len(rows)

    @wrap_exceptions
    async def backlog(self, shard: int, params: BacklogParams) -> BacklogStats:
        cap = BACKLOG_CAP if params.cap is None else params.cap
        rows = await self.fetch(shard, "backlog", {"now": params.now, "cap": cap})
        return BacklogStats(due=rows[0]["due"], oldest_due_age_seconds=float(rows[0]["oldest_age"]))

    @wrap_exceptions
    async def maintain_history(
        self, shard: int, params: MaintainHistoryParams
    ) -> MaintenanceResult:
        """Day partitions ahead, old ones dropped, old keys purged (the janitor).

        One pass at a time on a shard, under a session advisory lock: a
        second janitor waits and then finds the work done."""
        async with self.connection(shard) as conn:
            lock = {"key": _HISTORY_LOCK_KEY}
            await conn.execute(QUERIES["history_lock"], lock)
            try:
                return await self._maintain_history(conn, params)
            finally:
                # A severed connection has dropped the lock with its session.
                if not conn.closed:
                    await conn.execute(QUERIES["history_unlock"], lock)

    async def _maintain_history(
        self, conn: psycopg.AsyncConnection[Any], params: MaintainHistoryParams
    ) -> MaintenanceResult:
        result = MaintenanceResult()
        today = params.today
        if today is None:
            cur = await conn.execute(QUERIES["history_today"], {})
            found = await cur.fetchone()
            assert found is not None
            today = found[0]
        cutoff = today - timedelta(days=params.retention_days)
        cur = await conn.execute(
            QUERIES["ensure_partitions"],
            {
                "from": today - timedelta(days=1),
                "to": today + timedelta(days=params.days_ahead),
            },
        )
        made = await cur.fetchone()
        result.made_partitions = made[0] if made else 0
        cur = await conn.execute(QUERIES["list_partitions"], {})
        for name, _parent in await cur.fetchall():
            day = datetime.strptime(name[-8:], "%Y%m%d").date()
            if day < cutoff:
                await conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
                result.dropped_partitions.append(name)
        before = datetime.combine(cutoff, datetime.min.time(), tzinfo=UTC)
        cur = await conn.execute(QUERIES["purge_default_partitions"], {"before": before})
        purged = await cur.fetchone()
        result.purged_rows = purged[0] if purged else 0
        result.cutoff = before
        # In batches of their own statements, as many as expired: a cap of
        # one batch a pass (the janitor's pass is hourly) let keys pile up
        # past 240,000 keyed creates a day.
        for _ in range(params.batches):
            cur = await conn.execute(
                QUERIES["purge_job_keys"], {"before": before, "limit": params.batch}
            )
            result.purged_keys += cur.rowcount
            if cur.rowcount < params.batch:
                break
        return result
