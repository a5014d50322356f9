"""The worker's contract: claims, the wave forecast, heartbeats and
completions (STYLE.md item 17)."""

from __future__ import annotations

import uuid
from typing import Protocol

from cluster.model import (
    ClaimedJob,
    ClaimParams,
    DueAheadParams,
    DueSecond,
    FinishParams,
    HeartbeatParams,
    ReleaseParams,
    RevokeReplacedParams,
    WorkerBeatParams,
)
from cluster.store.contracts.limits import LimitedClaims
from cluster.store.contracts.readings import WorkersSeen

__all__ = ["JobClaims"]


class JobClaims(WorkersSeen, LimitedClaims, Protocol):
    """What a worker does to jobs: every write after the claim is fenced by
    the attempt it claimed (DESIGN.md, invariant 2)."""

    async def claim_jobs(self, shard: int, params: ClaimParams) -> list[ClaimedJob]:
        """Due SCHEDULED jobs (those due within ``prefetch_seconds`` too, or,
        with a ``window``, those due in it), earliest first, become RUNNING
        with a new attempt and a lease; rows another claim holds are skipped,
        never waited for."""
        ...

    async def due_ahead(self, shard: int, params: DueAheadParams) -> list[DueSecond]:
        """SCHEDULED jobs due in each upcoming second (after now, up to the
        horizon), counting at most ``params.limit`` jobs, earliest first:
        the worker's wave forecast. Seconds with no job are left out."""
        ...

    async def heartbeat(self, shard: int, params: HeartbeatParams) -> set[uuid.UUID]:
        """Extend leases; returns the ids still held (the others were lost).
        Raises :class:`~cluster.errors.SlotMoving` when some were not
        extended because their slot is fenced on ``shard`` (moving to
        another shard): its ``written`` are the ids extended, ``refused``
        the fenced ones, which are not lost."""
        ...

    async def finish_jobs(self, shard: int, params: FinishParams) -> set[uuid.UUID]:
        """Record outcomes, each fenced by its attempt; returns the ids written.
        Raises :class:`~cluster.errors.SlotMoving` when some were not
        written because their slot is fenced on ``shard``; the others are
        written all the same (its ``written``), the fenced ones (its
        ``refused``) belong to the slot's new owner."""
        ...

    async def release_jobs(self, shard: int, params: ReleaseParams) -> set[uuid.UUID]:
        """Give back RUNNING jobs this worker holds, fenced by attempt; a
        refunded (never fired) attempt does not count against
        ``max_attempts``, a fired one is logged as RELEASED."""
        ...

    async def revoke_replaced(self, shard: int, params: RevokeReplacedParams) -> int:
        """Concurrency REPLACE: revoke the cron's other RUNNING occurrences
        (the worker that starts the new one does it)."""
        ...

    async def worker_beat(self, shard: int, params: WorkerBeatParams) -> None: ...
