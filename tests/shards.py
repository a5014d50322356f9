"""Direct shard access for the fault tests: create through the store seam,
read back with plain SQL on every shard."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import psycopg

import shardmap
from cluster.model import CreateJobParams
from cluster.pgstore import PgStore

__all__ = ["create_jobs", "rows"]


def create_jobs(dsns: list[str], jobs: Sequence[CreateJobParams]) -> None:
    """Create through the store seam, each on the shard its id routes to."""
    shards = shardmap.ShardMap(len(dsns))

    async def create() -> None:
        store = PgStore(dsns, max_size=2, timeout=5.0)
        await store.open()
        try:
            for p in jobs:
                await store.create_job(shards.shard_of(p.id), p)
        finally:
            await store.close()

    asyncio.run(create())


def rows(
    dsns: list[str], query: str, params: dict[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    """``query`` on every shard, rows concatenated."""
    out: list[tuple[Any, ...]] = []
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            out.extend(conn.execute(query, params).fetchall())
    return out
