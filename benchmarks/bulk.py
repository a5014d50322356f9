"""Bulk-load benchmark jobs straight into the shards' tables with COPY.

The wave must be in the table before it is due, and the API (one INSERT and
one round trip per job) is far too slow to put a million rows there in a
minute. Ids come from :func:`shardmap.new_uuid` and each row goes to the shard
its id routes to, exactly as the API would place it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import psycopg

import shardmap
from benchmarks.sql import query
from cluster.instants import require_aware

__all__ = ["JobSpec", "LoadResult", "copy_jobs", "route_ids"]

# Rows per COPY write: large enough that per-call overhead vanishes, small
# enough that the formatted text of one chunk stays a few MB.
_CHUNK = 20_000


@dataclass(frozen=True)
class JobSpec:
    """What every row of one load looks like (only the id differs)."""

    owner: str
    type: str
    run_at: datetime
    target: dict[str, Any]
    payload: Any = field(default_factory=dict)
    max_attempts: int = 3
    timeout_seconds: int = 30

    def __post_init__(self) -> None:
        require_aware(self.run_at, "run_at")

    def line_tail(self) -> str:
        """Everything after the id of one COPY text line, newline included."""
        when = self.run_at.isoformat()
        fields = [
            self.owner,
            self.type,
            when,  # scheduled_for: the logical time is the asked time here
            when,  # run_at
            "SCHEDULED",
            str(self.max_attempts),
            str(self.timeout_seconds),
            str(self.target["kind"]),
            json.dumps(self.target, separators=(",", ":")),
            json.dumps(self.payload, separators=(",", ":")),
        ]
        return "\t" + "\t".join(_copy_text(f) for f in fields) + "\n"


@dataclass(frozen=True)
class LoadResult:
    per_shard: list[int]
    seconds: float

    @property
    def total(self) -> int:
        return sum(self.per_shard)


def _copy_text(value: str) -> str:
    # COPY's text format gives these four characters a meaning of their own.
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


def route_ids(count: int, shard_count: int) -> list[list[uuid.UUID]]:
    """``count`` fresh job ids, grouped by the shard each one routes to."""
    shards = shardmap.ShardMap(shard_count)
    out: list[list[uuid.UUID]] = [[] for _ in range(shard_count)]
    for _ in range(count):
        value = shardmap.new_uuid()
        out[shards.shard_of(value)].append(value)
    return out


def _copy_shard(dsn: str, ids: list[uuid.UUID], tails: list[str], run: int, table: str) -> int:
    # One transaction per shard: the whole load becomes visible at once, as a
    # wave that was materialized ahead of time would be. Row i takes the tail
    # (the owner) of its run of ``run`` rows, in rotation.
    with psycopg.connect(dsn) as conn:
        with conn.cursor() as cur, cur.copy(query("copy_jobs", table)) as copy:
            for start in range(0, len(ids), _CHUNK):
                copy.write(
                    "".join(
                        f"{v}{tails[(start + k) // run % len(tails)]}"
                        for k, v in enumerate(ids[start : start + _CHUNK])
                    )
                )
        conn.commit()
        conn.execute(query("analyze_table", table))
    return len(ids)


def copy_jobs(
    dsns: list[str],
    count: int,
    spec: JobSpec,
    table: str = "jobs",
    *,
    owners: Sequence[str] = (),
    run: int = 1000,
) -> LoadResult:
    """Insert ``count`` jobs like ``spec`` across the shards; all shards load
    at once. With ``owners``, the rows are theirs instead of ``spec.owner``'s,
    in runs of ``run`` rows a shard in rotation: what concurrent batch
    requests of several owners leave in a table."""
    if run < 1:
        raise ValueError("run must be at least 1")
    started = time.monotonic()
    groups = route_ids(count, len(dsns))
    tails = [replace(spec, owner=o).line_tail() for o in owners] or [spec.line_tail()]
    with ThreadPoolExecutor(max_workers=len(dsns)) as pool:
        futures = [
            pool.submit(_copy_shard, dsn, ids, tails, run, table)
            for dsn, ids in zip(dsns, groups, strict=True)
        ]
        per_shard = [f.result() for f in futures]
    return LoadResult(per_shard, time.monotonic() - started)
