"""Limits that hold across the cluster, on PostgreSQL shards (issue 44):
the limited claim (cluster/store/sql/limits.sql) and the run-time limits."""

from __future__ import annotations

from datetime import datetime

from psycopg.rows import tuple_row

from cluster.model import (
    AdmittedJob,
    LimitedClaimParams,
    LimitSetting,
    SetLimitParams,
    TargetLimit,
    admit,
    shard_share,
)
from cluster.store.pgshards import PgShards, wrap_exceptions
from cluster.store.postgres.claims import claimed_row
from cluster.store.sql import QUERIES

__all__ = ["PgLimits"]


class PgLimits(PgShards):
    """:class:`~cluster.store.contracts.limits.LimitedClaims` on PostgreSQL."""

    @wrap_exceptions
    async def claim_limited(self, shard: int, params: LimitedClaimParams) -> list[AdmittedJob]:
        share = shard_share(params.limit, params.shards)
        async with self.connection(shard) as conn, conn.transaction():
            async with conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(QUERIES["limit_lock"], {"key": params.key, "now": params.now})
                row = await cur.fetchone()
            assert row is not None
            tat, now = row
            # The rate's room, before the running ones are counted (the
            # statement takes the lesser of the two).
            room = admit(
                share, tat=tat, now=now, running=0,
                horizon=params.horizon_seconds, most=params.most,
            )  # fmt: skip
            if room.count <= 0:
                return []
            async with conn.cursor(row_factory=claimed_row) as cur:
                await cur.execute(
                    QUERIES["claim_limited"],
                    {
                        "key": params.key,
                        "now": now,
                        "most": room.count,
                        "concurrency": share.concurrency,
                        "worker": params.worker_id,
                        "horizon": params.horizon_seconds,
                        "lease": params.lease_seconds,
                        "grace": params.grace_seconds,
                        "base": room.base,
                        "interval": share.interval,
                    },
                )
                jobs = await cur.fetchall()
        return [AdmittedJob(job, room.start(i, now)) for i, job in enumerate(jobs)]

    @wrap_exceptions
    async def count_waiting(self, shard: int, keys: list[str]) -> dict[str, int]:
        rows = await self.fetch_as(shard, "limits_waiting", {"keys": keys}, tuple_row)
        return {key: jobs for key, jobs in rows}

    @wrap_exceptions
    async def slow_limit(self, shard: int, key: str, until: datetime) -> None:
        await self.fetch(shard, "limit_slow", {"key": key, "until": until})

    @wrap_exceptions
    async def read_limits(self, shard: int) -> list[LimitSetting]:
        rows = await self.fetch_as(shard, "limits_read", {}, tuple_row)
        return [
            LimitSetting(key, TargetLimit(conc, rate, burst), at)
            for key, conc, rate, burst, at in rows
        ]

    @wrap_exceptions
    async def set_limit(self, shard: int, params: SetLimitParams) -> None:
        if params.limit is None:
            await self.fetch(shard, "limit_drop", {"key": params.key})
            return
        limit = params.limit
        await self.fetch(
            shard,
            "limit_set",
            {
                "key": params.key,
                "concurrency": limit.concurrency,
                "rate": limit.rate,
                "burst": limit.burst,
            },
        )
