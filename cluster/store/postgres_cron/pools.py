"""The cron store's base on PostgreSQL: a :class:`PgStore`'s pools, and the
reading both cron roles take (:class:`~cluster.store.contracts.readings.CronPending`)."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg.rows import tuple_row

from cluster.model import (
    PendingInfo,
    PendingParams,
)
from cluster.store.pgshards import wrap_exceptions
from cluster.store.postgres import PgStore

__all__ = ["PgCronPools"]


class PgCronPools:
    """Crons on the pools of a :class:`PgStore` (one shard map, one error
    translation)."""

    def __init__(self, store: PgStore) -> None:
        self.store = store

    @property
    def shard_count(self) -> int:
        # The store's: it grows when a shard is added to the running cluster.
        return self.store.shard_count

    async def _rows(self, shard: int, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return await self.store.fetch(shard, name, params)

    @wrap_exceptions
    async def pending(self, shard: int, params: PendingParams) -> dict[uuid.UUID, PendingInfo]:
        if not params.cron_ids:
            return {}
        args = {
            "ids": list(params.cron_ids),
            "finished": [params.with_finished] * len(params.cron_ids),
        }
        rows = await self.store.fetch_as(shard, "crons_pending", args, tuple_row)
        return {cron_id: PendingInfo(int(n), last) for cron_id, n, last in rows}
