"""Direct shard access for the fault tests: create through the store seam,
read back with plain SQL on every shard."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

import shardmap
from cluster.model import CreateJobParams
from cluster.store.postgres import PgStore
from tests.helpers import job_params

__all__ = ["api_body", "create_jobs", "job_on", "rows"]


def job_on(shards: shardmap.ShardMap, shard: int, url: str, **kwargs: Any) -> CreateJobParams:
    """``job_params`` with an id that routes to ``shard``."""
    slot = random.choice([s for s in range(shardmap.SLOTS) if shards.shard_of_slot(s) == shard])
    return job_params(url, **kwargs)._replace(id=shardmap.new_uuid(slot))


def api_body(url: str, run_at: datetime, payload: Any = None) -> dict[str, Any]:
    """A POST /api/v1/jobs body firing ``url`` at ``run_at``."""
    return {
        "type": "FAULT",
        "runAt": run_at.isoformat().replace("+00:00", "Z"),
        "target": {"kind": "HTTP", "url": url},
        "payload": payload or {},
        "timeoutSeconds": 30,
        "maxAttempts": 10,
    }


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
