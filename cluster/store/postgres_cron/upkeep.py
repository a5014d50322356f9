"""The materializer's and janitor's cron contract on PostgreSQL."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator
from datetime import UTC, datetime

from psycopg.rows import tuple_row

from cluster.model import (
    DueCountsParams,
    DueCron,
    DueCronsParams,
    LastSuccessParams,
    MaterializeBatchParams,
    MaterializeResult,
    PruneOccurrencesParams,
    WaitingCronsParams,
)
from cluster.store.pgshards import wrap_exceptions
from cluster.store.postgres_cron.calendars import PgCalendars
from cluster.store.sql import QUERIES

__all__ = ["PgCronUpkeep"]

# The keyset start: before every (next_fire_at, id).
_FIRST_AT = datetime(1, 1, 1, tzinfo=UTC)

_FIRST_ID = uuid.UUID(int=0)


class PgCronUpkeep(PgCalendars):
    """:class:`~cluster.store.contracts.cron_upkeep.CronUpkeep` on PostgreSQL."""

    @wrap_exceptions
    async def database_now(self, shard: int) -> datetime:
        [row] = await self._rows(shard, "cron_clock", {})
        now: datetime = row["now"]
        return now

    def cron_soon(self, shard: int) -> AsyncGenerator[None, None]:
        # NOTIFY vakit_cron_soon comes from cron_jobs' triggers (migration 15).
        return self.store.listen(shard, "vakit_cron_soon")

    @wrap_exceptions
    async def due(self, shard: int, params: DueCronsParams) -> list[DueCron]:
        after_at, after_id = params.after or (_FIRST_AT, _FIRST_ID)
        args = {
            "until": params.until,
            "unsettled_until": params.unsettled_until or params.until,
            "after_at": after_at,
            "after_id": after_id,
            "limit": params.limit,
        }
        rows = await self.store.fetch_as(shard, "due_crons", args, tuple_row)
        return [DueCron(*r) for r in rows]

    @wrap_exceptions
    async def due_counts(self, shard: int, params: DueCountsParams) -> list[tuple[datetime, int]]:
        args = {"until": params.until, "now": params.now}
        rows = await self.store.fetch_as(shard, "cron_due_counts", args, tuple_row)
        return [(at, int(n)) for at, n in rows]

    @wrap_exceptions
    async def waiting_fixed_delay(self, shard: int, params: WaitingCronsParams) -> list[DueCron]:
        args = {"after_id": params.after or _FIRST_ID, "limit": params.limit}
        rows = await self.store.fetch_as(shard, "waiting_fixed_delay_crons", args, tuple_row)
        return [DueCron(*r) for r in rows]

    @wrap_exceptions
    async def materialize(self, shard: int, params: MaterializeBatchParams) -> MaterializeResult:
        items = params.items
        if not items:
            return MaterializeResult(frozenset(), 0)
        occ = [(p.cron_id, o) for p in items for o in p.occurrences]
        args = {
            "ids": [p.cron_id for p in items],
            "expected": [p.expected_next for p in items],
            "next": [p.next_fire_at for p in items],
            "last_fire": [p.last_fire for p in items],
            "missed": [p.missed for p in items],
            "skipped": [p.skipped for p in items],
            "runs": [p.runs for p in items],
            "cal_version": [p.calendar_version for p in items],
            "settled": [p.settled for p in items],
            "occ_cron": [c for c, _ in occ],
            "occ_job": [o.job_id for _, o in occ],
            "occ_scheduled": [o.scheduled_for for _, o in occ],
            "occ_run_at": [o.run_at for _, o in occ],
            "occ_deadline": [o.deadline_at for _, o in occ],
            "now": params.now,
            "far_horizon": params.far_horizon_seconds,
        }
        rows = await self.store.fetch_as(shard, "materialize_crons", args, tuple_row)
        advanced = frozenset(i for kind, i in rows if kind == "advanced")
        refused = tuple(i for kind, i in rows if kind == "refused")
        created = sum(1 for kind, _ in rows if kind == "created")
        return MaterializeResult(advanced, created, refused)

    @wrap_exceptions
    async def prune_occurrences(self, shard: int, params: PruneOccurrencesParams) -> int:
        args = {"before": params.before, "limit": params.limit}
        async with self.store.connection(shard) as conn:
            cur = await conn.execute(QUERIES["purge_cron_occurrences"], args)
            return cur.rowcount

    @wrap_exceptions
    async def last_successes(
        self, shard: int, params: LastSuccessParams
    ) -> list[tuple[uuid.UUID, datetime]]:
        deadline = time.monotonic() + params.fold_budget_seconds
        await self.store.fetch(shard, "summarize_history", {})
        while True:
            [folded] = await self.store.fetch(
                shard,
                "fold_cron_successes",
                {
                    "lag": params.fold_lag_seconds,
                    "limit": params.fold_limit,
                    "read": params.fold_read_rows,
                },
            )
            if not folded["more"] or time.monotonic() > deadline:
                break
        rows = await self.store.fetch_as(
            shard, "cron_last_success", {"limit": params.limit}, tuple_row
        )
        return [(cron_id, when) for cron_id, when in rows]
