"""The operator's reads on PostgreSQL: search, lateness, pending per owner."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg.rows import dict_row

from cluster.model import (
    AttemptRecord,
    JobRecord,
    JobSearchParams,
    JobStatus,
    LatenessMinute,
    LatenessParams,
    OwnerCountsParams,
)
from cluster.model.jsontext import json_text
from cluster.store.pgshards import wrap_exceptions
from cluster.store.postgres.rows import _record_from_row
from cluster.store.postgres.upkeep import PgUpkeep
from cluster.store.sql import QUERIES

__all__ = ["PgInsight", "search_statements"]

# The search's open bounds: every UUID is below the first, every time inside the others.
_ABOVE_ALL_IDS = uuid.UUID(int=(1 << 128) - 1)

_NO_BOUND = (datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC))

# How much earlier than its runAt a job that ran may have finished by the
# database's clock: a worker whose clock is ahead fires early. Generous.
_RAN_MARGIN = timedelta(hours=1)


def search_statements(params: JobSearchParams) -> list[tuple[str, dict[str, Any]]]:
    """The statements a search runs on a shard, each a query name and its
    arguments: one page each, merged newest first. benchmarks.search
    EXPLAINs these same statements, so it cannot drift from them."""
    finished = params.finished_from is not None or params.finished_to is not None
    args: dict[str, Any] = {
        "owner": params.owner,
        "before": params.before or _ABOVE_ALL_IDS,
        "type": params.type,
        "cron_id": params.cron_id,
        # Containment (labels @> it): every pair asked is the job's.
        "labels": json_text(params.labels) if params.labels else None,
        "run_from": params.run_at_from or _NO_BOUND[0],
        "run_to": params.run_at_to or _NO_BOUND[1],
        # Hot and far rows have not finished: any finished bound leaves them out.
        "finished": False if finished else None,
        "finished_from": params.finished_from or _NO_BOUND[0],
        "finished_to": params.finished_to or _NO_BOUND[1],
        "limit": params.limit,
    }
    # A job that ran finished after its runAt: a runAt bound also
    # bounds the finish of every status but CANCELLED, and so prunes
    # the history's day partitions (search_jobs).
    args["ran_from"] = args["finished_from"]
    if params.run_at_from is not None and params.run_at_from > _NO_BOUND[0] + _RAN_MARGIN:
        args["ran_from"] = max(args["finished_from"], params.run_at_from - _RAN_MARGIN)
    if params.cron_id is not None:
        # A cron's rows come from the cron indexes, whatever the status.
        return [
            ("search_jobs_of_cron", {**args, "status": status.value if status else None})
            for status in params.statuses or (None,)
        ]
    if params.statuses is None:
        return [("search_jobs", args)]
    out: list[tuple[str, dict[str, Any]]] = []
    for status in params.statuses:
        each = {**args, "status": status.value}
        if status is not JobStatus.CANCELLED:
            each["finished_from"] = args["ran_from"]
        out.append(("search_jobs_in_status", each))
    return out


class PgInsight(PgUpkeep):
    """:class:`~cluster.store.contracts.insight.JobInsight` on PostgreSQL shards
    (its backlog is the upkeep's)."""

    @wrap_exceptions
    async def search_jobs(self, shard: int, params: JobSearchParams) -> list[JobRecord]:
        statements = search_statements(params)
        started = time.perf_counter()
        try:
            async with (
                self.connection(shard) as conn,
                conn.transaction(),
                conn.cursor(row_factory=dict_row) as cur,
            ):
                await cur.execute(QUERIES["search_plan"])
                rows: list[dict[str, Any]] = []
                for name, args in statements:
                    await cur.execute(QUERIES[name], args, prepare=True)
                    rows += await cur.fetchall()
                if len(statements) > 1:
                    rows.sort(key=lambda r: r["id"], reverse=True)
                    del rows[params.limit :]
                attempts: dict[uuid.UUID, list[AttemptRecord]] = {}
                if params.with_attempts and rows:
                    await cur.execute(QUERIES["get_attempts_of"], {"ids": [r["id"] for r in rows]})
                    for a in await cur.fetchall():
                        attempts.setdefault(a.pop("job_id"), []).append(AttemptRecord(**a))
        finally:
            self._observe(shard, "search_jobs", time.perf_counter() - started)
        return [_record_from_row(r, tuple(attempts.get(r["id"], ()))) for r in rows]

    @wrap_exceptions
    async def start_lateness(self, shard: int, params: LatenessParams) -> list[LatenessMinute]:
        rows = await self.fetch(
            shard, "start_lateness", {"minutes": params.minutes, "now": params.now}
        )
        return [
            LatenessMinute(r["minute"], r["n"], r["pct"][0], r["pct"][1], r["worst"]) for r in rows
        ]

    @wrap_exceptions
    async def pending_by_owner(self, shard: int, params: OwnerCountsParams) -> dict[str, int]:
        rows = await self.fetch(shard, "pending_by_owner", {"limit": params.limit})
        return {r["owner"]: r["n"] for r in rows}
