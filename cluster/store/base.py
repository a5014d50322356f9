"""The storage seam: one method per operation, one params object per method,
the shard always explicit.

Implementations: :class:`cluster.store.postgres.PgStore` (PostgreSQL, one
pool per shard) and :class:`cluster.store.memory.MemStore` (in memory, for
unit tests and the fast API tier). Both raise only :mod:`cluster.errors`
exceptions, and ``tests/contract`` holds them to the same rules.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Sequence
from datetime import datetime
from typing import Protocol

from cluster.errors import Conflict
from cluster.model import (
    WORKER_SEEN_SECONDS,
    BackfillParams,
    BackfillResult,
    BacklogParams,
    BacklogStats,
    CancelParams,
    ClaimedJob,
    ClaimParams,
    CreateJobParams,
    CreateJobsParams,
    CreateResult,
    CronRecord,
    CronRun,
    CronRunsParams,
    DeleteCronParams,
    DueAheadParams,
    DueCountsParams,
    DueCron,
    DueCronsParams,
    DueSecond,
    FinishParams,
    GetCronParams,
    GetJobParams,
    HeartbeatParams,
    JobRecord,
    JobSearchParams,
    LastSuccessParams,
    LatenessMinute,
    LatenessParams,
    ListCronsParams,
    MaintainHistoryParams,
    MaintenanceResult,
    MaterializeBatchParams,
    MaterializeResult,
    MoveFarParams,
    OwnerCountsParams,
    PauseCronParams,
    PauseJobParams,
    PendingInfo,
    PendingParams,
    PruneOccurrencesParams,
    ReapParams,
    ReapResult,
    ReleaseParams,
    RescheduleParams,
    ResumeCronParams,
    ResumeJobParams,
    RetryJobParams,
    RevokeReplacedParams,
    TriggerCronParams,
    WaitingCronsParams,
    WorkerBeatParams,
    WorkersSeenParams,
)

# WORKER_SEEN_SECONDS is re-exported: readiness and status read the window here.
__all__ = ["CRON_SOON_SECONDS", "WORKER_SEEN_SECONDS", "CronStore", "Store"]

# A cron written due within this many seconds wakes the materializer
# (CronStore.cron_soon; migration 15 has the same figure).
CRON_SOON_SECONDS = 60.0


class Store(Protocol):
    """Every job operation the API, the worker and the leader loops use.

    One method per operation, one params object per method (River's style),
    the shard always explicit. Implementations raise only
    :mod:`cluster.errors` exceptions: no driver error crosses this seam.
    ``tests/contract`` runs the same cases against every implementation."""

    shard_count: int
    # The schema version this code expects; a shard below it is not ready.
    latest_schema_version: int

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def schema_version(self, shard: int) -> int:
        """The schema version the shard has (0: never migrated)."""
        ...

    async def create_job(self, shard: int, params: CreateJobParams) -> CreateResult:
        """Insert a job; with an idempotency key, a repeat returns the first job
        (``created=False``) and a reuse of the key with another body raises
        :class:`~cluster.errors.Conflict`."""
        ...

    async def create_jobs(
        self, shard: int, params: CreateJobsParams
    ) -> list[CreateResult | Conflict]:
        """Insert many jobs on one shard with one statement per table; one
        result per job, in order: a :class:`CreateResult` (``created=False``
        for an idempotent repeat, also of a key earlier in the same batch) or
        the :class:`~cluster.errors.Conflict` of a key reused with another
        body, returned in its slot. Never all-or-nothing."""
        ...

    async def get_job(self, shard: int, params: GetJobParams) -> JobRecord | None: ...

    async def reschedule_job(self, shard: int, params: RescheduleParams) -> JobRecord:
        """Move ``run_at`` of a SCHEDULED job; Conflict otherwise, NotFound if absent."""
        ...

    async def cancel_job(self, shard: int, params: CancelParams) -> JobRecord:
        """Cancel a job that has not started; Conflict otherwise, NotFound if absent."""
        ...

    async def search_jobs(self, shard: int, params: JobSearchParams) -> list[JobRecord]:
        """A page of the owner's jobs on this shard (near, far and history),
        newest first by id, below ``params.before``, filtered; with their
        attempt logs when ``params.with_attempts``."""
        ...

    async def retry_job(self, shard: int, params: RetryJobParams) -> JobRecord:
        """A finished job (of ``params.statuses``) becomes SCHEDULED again with
        the same id and scheduled_for and a new series of attempts; its
        attempt counter goes on, so old attempts stay fenced. NotFound if
        absent, Conflict if it is not in one of those statuses."""
        ...

    async def pause_job(self, shard: int, params: PauseJobParams) -> JobRecord:
        """A SCHEDULED one-shot job is held (never claimed) until resumed;
        idempotent. Conflict once it has started or for a cron occurrence."""
        ...

    async def resume_job(self, shard: int, params: ResumeJobParams) -> JobRecord:
        """A paused job waits for its runAt again (at once if it has passed);
        idempotent. Conflict once it is not SCHEDULED."""
        ...

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
        """Extend leases; returns the ids still held (the others were lost)."""
        ...

    async def finish_jobs(self, shard: int, params: FinishParams) -> set[uuid.UUID]:
        """Record outcomes, each fenced by its attempt; returns the ids written."""
        ...

    async def release_jobs(self, shard: int, params: ReleaseParams) -> set[uuid.UUID]:
        """Give back RUNNING jobs this worker holds, fenced by attempt; a
        refunded (never fired) attempt does not count against
        ``max_attempts``, a fired one is logged as RELEASED."""
        ...

    async def reap_expired(self, shard: int, params: ReapParams) -> ReapResult:
        """RUNNING jobs whose lease ran out: back to SCHEDULED with attempts
        left, to FAILED without; each attempt logged as LEASE_EXPIRED."""
        ...

    async def move_far_jobs(self, shard: int, params: MoveFarParams) -> int:
        """Far jobs due within the horizon move to the hot table; returns how many."""
        ...

    async def backlog(self, shard: int, params: BacklogParams) -> BacklogStats: ...

    async def start_lateness(self, shard: int, params: LatenessParams) -> list[LatenessMinute]:
        """Start lateness of the attempts logged on this shard that ended in
        the last ``params.minutes`` minutes, one entry per UTC minute that
        has any, oldest first (the operator's lateness chart)."""
        ...

    async def pending_by_owner(self, shard: int, params: OwnerCountsParams) -> dict[str, int]:
        """Jobs not yet finished (scheduled, far or running) per owner, cron
        occurrences included: the ``params.limit`` owners with the most."""
        ...

    async def revoke_replaced(self, shard: int, params: RevokeReplacedParams) -> int:
        """Concurrency REPLACE: revoke the cron's other RUNNING occurrences."""
        ...

    async def worker_beat(self, shard: int, params: WorkerBeatParams) -> None: ...

    async def workers_seen(self, shard: int, params: WorkersSeenParams) -> list[str]: ...

    async def maintain_history(
        self, shard: int, params: MaintainHistoryParams
    ) -> MaintenanceResult:
        """Day partitions ahead, history past the retention dropped, keys of
        jobs no longer pending purged (the janitor). Passes on one shard may
        be called at once (two leaders overlap); each must succeed."""
        ...


class CronStore(Protocol):
    """Every cron operation the API and the materializer use.

    Implementations: :class:`cluster.store.postgres_cron.PgCronStore` and
    :class:`cluster.store.memory_cron.MemCronStore`, held to the same rules by
    ``tests/contract/test_cron_store_contract.py``. They raise only
    :mod:`cluster.errors` exceptions. A cron's occurrences are jobs of the
    same shard: they are claimed, finished and kept in history through
    :class:`Store`.
    """

    shard_count: int

    async def create(self, shard: int, cron: CronRecord) -> tuple[CronRecord, bool]:
        """Insert; the same name with the same fingerprint returns the existing
        definition (``False``); the same name with another body raises
        :class:`~cluster.errors.Conflict`."""
        ...

    async def create_many(
        self, shard: int, crons: Sequence[CronRecord]
    ) -> list[tuple[CronRecord, bool] | Conflict]:
        """:meth:`create` for many crons with one statement: one result per
        cron, in order, a Conflict in the slot of a name reused with another
        body. Never all-or-nothing. Names must be distinct within a call."""
        ...

    async def get(self, shard: int, params: GetCronParams) -> CronRecord | None: ...

    async def list_page(self, shard: int, params: ListCronsParams) -> list[CronRecord]:
        """The owner's crons on this shard by name, after ``params.after``."""
        ...

    async def update(self, shard: int, cron: CronRecord) -> CronRecord:
        """Replace the definition (matched by id and owner); NotFound if absent."""
        ...

    async def delete(self, shard: int, params: DeleteCronParams) -> int:
        """Delete the definition and cancel its occurrences not yet started;
        returns how many were cancelled. NotFound if absent."""
        ...

    async def trigger(self, shard: int, params: TriggerCronParams) -> bool:
        """One extra occurrence; False if that instant has one already.
        Conflict when FORBID and an occurrence is pending or running."""
        ...

    async def runs(self, shard: int, params: CronRunsParams) -> list[CronRun]:
        """Recent occurrences (pending, far, finished), newest slot first."""
        ...

    async def pause(self, shard: int, params: PauseCronParams) -> CronRecord:
        """No slot is materialized while paused; occurrences not yet due are
        withdrawn and ``next_fire_at`` goes back to the earliest of them.
        Pausing again only changes the reason. NotFound if absent."""
        ...

    async def resume(self, shard: int, params: ResumeCronParams) -> CronRecord:
        """Slots are materialized again; those that passed while paused are
        late, and the misfire policy decides (as after an outage)."""
        ...

    async def backfill(self, shard: int, params: BackfillParams) -> BackfillResult:
        """Occurrences of past slots, each once by (cron_id, scheduled_for):
        a slot that has one already is reported (``exists``), or with
        ``rerun`` a finished one is revived with a new attempt series.
        ``dry_run`` writes nothing. NotFound if the cron is absent."""
        ...

    # -- the materializer ------------------------------------------------------

    async def database_now(self, shard: int) -> datetime:
        """The shard's clock (``now()``): the materializer compares its own with it."""
        ...

    def cron_soon(self, shard: int) -> AsyncGenerator[None, None]:
        """Wake-ups for the materializer: yields once when listening begins
        (what came before is not seen), then after each create, change or
        resume that left an enabled, unpaused cron of ``shard`` due within
        :data:`CRON_SOON_SECONDS` (a batch of them may come as one). Ends
        with :class:`~cluster.errors.ShardUnavailable` when the shard's link
        breaks; listen again."""
        ...

    async def due(self, shard: int, params: DueCronsParams) -> list[DueCron]: ...

    async def due_counts(self, shard: int, params: DueCountsParams) -> list[tuple[datetime, int]]:
        """(instant, enabled crons whose next_fire_at is that instant), by
        instant, up to ``params.until``: the size of the waves ahead."""
        ...

    async def waiting_fixed_delay(self, shard: int, params: WaitingCronsParams) -> list[DueCron]: ...

    async def pending(self, shard: int, params: PendingParams) -> dict[uuid.UUID, PendingInfo]:
        """Per cron: occurrences not finished (near and far), and when its
        latest occurrence finished. Every id asked for has an entry."""
        ...

    async def materialize(self, shard: int, params: MaterializeBatchParams) -> MaterializeResult:
        """Write many crons' occurrences and move their ``next_fire_at``, in
        one transaction: per cron a compare-and-set, occurrences only for the
        crons that won it, one per (cron_id, scheduled_for) ever."""
        ...

    async def last_successes(
        self, shard: int, params: LastSuccessParams
    ) -> list[tuple[uuid.UUID, datetime]]:
        """Enabled crons and their last success (their creation until one),
        the oldest ``params.limit`` first."""
        ...

    async def crons_by_owner(self, shard: int, params: OwnerCountsParams) -> dict[str, int]:
        """Cron jobs defined per owner: the ``params.limit`` owners with the most."""
        ...

    async def prune_occurrences(self, shard: int, params: PruneOccurrencesParams) -> int:
        """Delete a batch of the occurrence ledger's expired rows (see
        :class:`PruneOccurrencesParams`); returns how many went."""
        ...
