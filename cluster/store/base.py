"""The storage seam: one method per operation, one params object per method,
the shard always explicit.

Implementations: :class:`cluster.pgstore.PgStore` (PostgreSQL, one pool per
shard) and :class:`cluster.memstore.MemStore` (in memory, for unit tests of
the state machine). Both raise only :mod:`cluster.errors` exceptions.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Protocol

from cluster.model import (
    BacklogStats,
    CancelParams,
    ClaimedJob,
    ClaimParams,
    CreateJobParams,
    CreateResult,
    DueAheadParams,
    DueSecond,
    FinishParams,
    GetJobParams,
    HeartbeatParams,
    JobRecord,
    Lease,
    MaintenanceResult,
    ReapResult,
    RescheduleParams,
)

__all__ = ["WORKER_SEEN_SECONDS", "Store"]

# Workers beat into each shard every few seconds while they poll it: one seen
# within this window counts as polling it (readiness, status, /cluster).
WORKER_SEEN_SECONDS = 15.0


class Store(Protocol):
    shard_count: int

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def create_job(self, shard: int, params: CreateJobParams) -> CreateResult:
        """Insert a job; with an idempotency key, a repeat returns the first job
        (``created=False``) and a reuse of the key with another body raises
        :class:`~cluster.errors.Conflict`."""
        ...

    async def get_job(self, shard: int, params: GetJobParams) -> JobRecord | None: ...

    async def reschedule_job(self, shard: int, params: RescheduleParams) -> JobRecord:
        """Move ``run_at`` of a SCHEDULED job; Conflict otherwise, NotFound if absent."""
        ...

    async def cancel_job(self, shard: int, params: CancelParams) -> JobRecord:
        """Cancel a job that has not started; Conflict otherwise, NotFound if absent."""
        ...

    async def claim_jobs(self, shard: int, params: ClaimParams) -> list[ClaimedJob]: ...

    async def due_ahead(self, shard: int, params: DueAheadParams) -> list[DueSecond]:
        """SCHEDULED jobs due in each upcoming second (after now, up to the
        horizon), counting at most ``params.limit`` jobs, earliest first:
        the worker's wave forecast. Seconds with no job are left out."""
        ...

    async def heartbeat(self, shard: int, params: HeartbeatParams) -> set[uuid.UUID]:
        """Extend leases; returns the ids still held (the others were lost)."""
        ...

    async def finish_jobs(self, shard: int, params: FinishParams) -> set[uuid.UUID]:
        """Record outcomes, each fenced by its attempt; returns the ids written."""
        ...

    async def release_jobs(
        self,
        shard: int,
        leases: list[Lease],
        refunds: list[bool] | None = None,
        worker: str | None = None,
    ) -> set[uuid.UUID]:
        """Give back RUNNING jobs this worker holds; ``refunds`` marks the ones
        never fired, whose attempt does not count against ``max_attempts``."""
        ...

    async def reap_expired(
        self, shard: int, limit: int = 1000, now: datetime | None = None
    ) -> ReapResult: ...

    async def move_far_jobs(
        self, shard: int, horizon_seconds: float, limit: int = 1000, now: datetime | None = None
    ) -> int: ...

    async def backlog(self, shard: int, now: datetime | None = None) -> BacklogStats: ...

    async def revoke_replaced(self, shard: int, cron_id: uuid.UUID, keep: uuid.UUID) -> int:
        """Concurrency REPLACE: revoke the cron's other RUNNING occurrences."""
        ...

    async def worker_beat(self, shard: int, worker_id: str) -> None: ...

    async def workers_seen(self, shard: int, within_seconds: float = WORKER_SEEN_SECONDS) -> list[str]: ...

    async def maintain_history(
        self, shard: int, retention_days: int, today: date | None = None, days_ahead: int = 7
    ) -> MaintenanceResult:
        """Day partitions ahead, old ones dropped, old keys purged (the janitor)."""
        ...
