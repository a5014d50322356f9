"""The memory store's state: its shards' rows, history, attempt logs, keys
and beats, under one lock that stands for a database's row locks and
unique indexes; the base of every role's mixin."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from cluster.clock import Clock, SystemClock
from cluster.model import (
    AttemptRecord,
    JobRecord,
    JobStatus,
    LimitSetting,
)
from cluster.store.sql import load_migrations

__all__ = ["LATEST", "MAX_ATTEMPTS", "MemKey", "MemRow", "MemShard", "MemShards"]

# The schema this code expects, as PgStore reports it; the memory store is
# always "migrated" to it.
LATEST = len(load_migrations())

# max_attempts never grows past the schema's CHECK (refunds on release).
MAX_ATTEMPTS = 100


@dataclass
class MemRow:
    job: JobRecord
    locked_by: str | None = None
    claimed_at: datetime | None = None
    lease_until: datetime | None = None
    far: bool = False


@dataclass
class MemKey:
    job_id: uuid.UUID
    fingerprint: str | None
    created_at: datetime


@dataclass
class MemShard:
    rows: dict[uuid.UUID, MemRow] = field(default_factory=dict)
    history: dict[uuid.UUID, JobRecord] = field(default_factory=dict)
    attempts: dict[uuid.UUID, list[AttemptRecord]] = field(default_factory=dict)
    keys: dict[tuple[str, str], MemKey] = field(default_factory=dict)
    beats: dict[str, datetime] = field(default_factory=dict)
    limits: dict[str, LimitSetting] = field(default_factory=dict)  # target_limits
    buckets: dict[str, datetime] = field(default_factory=dict)  # limit_buckets


class MemShards:
    """Shards in memory, on an injected clock: what every role's mixin shares."""

    latest_schema_version = LATEST

    def __init__(self, shard_count: int, clock: Clock | None = None) -> None:
        self.shard_count = shard_count
        self.clock = clock or SystemClock()
        self._shards = [MemShard() for _ in range(shard_count)]
        # One lock stands for the row locks and unique indexes of a database.
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def _shard(self, shard: int) -> MemShard:
        if not 0 <= shard < self.shard_count:
            raise ValueError(f"shard {shard} out of range 0..{self.shard_count - 1}")
        return self._shards[shard]

    def _now(self, now: datetime | None = None) -> datetime:
        return now or self.clock.now()

    def _log(self, s: MemShard, job_id: uuid.UUID, record: AttemptRecord) -> None:
        s.attempts.setdefault(job_id, []).append(record)

    def _to_history(
        self, s: MemShard, row: MemRow, status: JobStatus, error: str | None, now: datetime
    ) -> JobRecord:
        del s.rows[row.job.id]
        done = dataclasses.replace(
            row.job,
            status=status,
            last_error=error or row.job.last_error,
            finished_at=now,
            paused_at=None,
            pause_reason=None,
        )
        s.history[done.id] = done
        return done

    @staticmethod
    def _free(row: MemRow) -> None:
        row.locked_by = row.lease_until = row.claimed_at = None

    async def schema_version(self, shard: int) -> int:
        self._shard(shard)
        return LATEST

    def _get(
        self, s: MemShard, job_id: uuid.UUID, owner: str, with_attempts: bool
    ) -> JobRecord | None:
        row = s.rows.get(job_id)
        job = row.job if row else s.history.get(job_id)
        if job is None or job.owner != owner:
            return None
        if with_attempts:
            logged = sorted(s.attempts.get(job_id, ()), key=lambda a: (a.attempt, a.finished_at))
            job = dataclasses.replace(job, attempts=tuple(logged))
        return job
