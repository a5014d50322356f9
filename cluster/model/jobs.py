"""Jobs: states, records and the parameter objects of the job store seam.

One small params object per store operation (River's style): the shard is
always an explicit argument beside it, never an ambient default.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import StrEnum
from typing import Any, NamedTuple

__all__ = [
    "TERMINAL",
    "WORKER_SEEN_SECONDS",
    "AttemptRecord",
    "BacklogParams",
    "BacklogStats",
    "CancelParams",
    "ClaimParams",
    "ClaimedJob",
    "CreateJobParams",
    "CreateJobsParams",
    "CreateResult",
    "DueAheadParams",
    "DueSecond",
    "FinishParams",
    "GetJobParams",
    "HeartbeatParams",
    "JobRecord",
    "JobResult",
    "JobStatus",
    "LatenessMinute",
    "LatenessParams",
    "Lease",
    "MaintainHistoryParams",
    "MaintenanceResult",
    "MoveFarParams",
    "Outcome",
    "OwnerCountsParams",
    "ReapParams",
    "ReapResult",
    "ReleaseParams",
    "RescheduleParams",
    "RevokeReplacedParams",
    "WorkerBeatParams",
    "WorkersSeenParams",
]


# Workers beat into each shard every few seconds while they poll it: one seen
# within this window counts as polling it (readiness, status, /cluster).
WORKER_SEEN_SECONDS = 15.0


class JobStatus(StrEnum):
    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"


TERMINAL = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.SKIPPED}
)


class Outcome(StrEnum):
    """How one attempt ended, as the worker reports it."""

    SUCCEEDED = "SUCCEEDED"
    RETRY = "RETRY"  # failed, attempts left: back to SCHEDULED after a backoff
    FAILED = "FAILED"  # failed for good: no attempts left, or a permanent error
    SKIPPED = "SKIPPED"  # not fired: a cron occurrence past its starting deadline


class CreateJobParams(NamedTuple):
    """One job to write. A named tuple, as :class:`ClaimedJob` is: a batch
    create makes a thousand, and a frozen dataclass sets each field through
    ``object.__setattr__`` (3.0 us a job here, a tuple 1.7 us)."""

    id: uuid.UUID
    owner: str
    type: str
    run_at: datetime
    scheduled_for: datetime
    target: dict[str, Any]
    payload: Any
    max_attempts: int
    timeout_seconds: int
    idempotency_key: str | None = None
    fingerprint: str | None = None
    cron_id: uuid.UUID | None = None
    far: bool = False  # due beyond the near horizon: goes to the far table
    # Set: the store places the job itself, on the database's clock (far
    # when run_at > now() + this), and ``far`` is not read. None: ``far``
    # says (the caller decided, on its own clock).
    far_horizon_seconds: float | None = None
    # The user's string map, searchable by exact match; None when it has
    # none (stored NULL: a job without labels costs nothing).
    labels: dict[str, str] | None = None

    @property
    def target_kind(self) -> str:
        return str(self.target["kind"])


@dataclass(frozen=True)
class CreateJobsParams:
    """Many creates on one shard, written with one statement (the batch API).

    Each job keeps its own idempotency key and gets its own result."""

    jobs: tuple[CreateJobParams, ...]


@dataclass(frozen=True)
class AttemptRecord:
    attempt: int
    worker: str | None
    started_at: datetime | None
    finished_at: datetime
    outcome: str
    error: str | None
    lateness_seconds: float | None


@dataclass(frozen=True)
class JobRecord:
    id: uuid.UUID
    owner: str
    type: str
    status: JobStatus
    run_at: datetime
    scheduled_for: datetime
    attempt: int
    max_attempts: int
    timeout_seconds: int
    target: dict[str, Any]
    payload: Any
    idempotency_key: str | None = None
    cron_id: uuid.UUID | None = None
    last_error: str | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    attempts: tuple[AttemptRecord, ...] = ()
    paused_at: datetime | None = None  # a paused job waits, SCHEDULED, until resumed
    pause_reason: str | None = None
    labels: dict[str, str] | None = None  # None: no labels


@dataclass(frozen=True)
class CreateResult:
    job: JobRecord
    created: bool  # False: an idempotent repeat, the first job is returned


@dataclass(frozen=True)
class GetJobParams:
    id: uuid.UUID
    owner: str
    with_attempts: bool = True


@dataclass(frozen=True)
class RescheduleParams:
    id: uuid.UUID
    owner: str
    run_at: datetime
    far: bool = False


@dataclass(frozen=True)
class CancelParams:
    id: uuid.UUID
    owner: str
    now: datetime | None = None


@dataclass(frozen=True)
class ClaimParams:
    """Claim up to ``limit`` SCHEDULED jobs, earliest ``run_at`` first: those
    due by now + ``prefetch_seconds``, or, when ``window`` is given, those
    with ``window[0] <= run_at < window[1]`` (a preloaded wave)."""

    worker_id: str
    limit: int
    lease_seconds: float
    grace_seconds: float
    prefetch_seconds: float = 0.0
    now: datetime | None = None  # None: the database's now()
    window: tuple[datetime, datetime] | None = None
    # Keys whose jobs this claim leaves out (limited keys, claimed by
    # claim_limited, cluster/model/limits.py); empty: the claim as it was.
    limited: tuple[str, ...] = ()


class DueSecond(NamedTuple):
    """SCHEDULED jobs due in the second starting at ``at`` (a wave forecast)."""

    at: datetime
    jobs: int


@dataclass(frozen=True)
class DueAheadParams:
    """How many SCHEDULED jobs fall due in each second after now, up to now +
    ``horizon_seconds``; only the first ``limit`` jobs by ``run_at`` are
    counted, so a forecast costs at most that many index entries."""

    horizon_seconds: float
    limit: int
    now: datetime | None = None  # None: the database's now()


class ClaimedJob(NamedTuple):
    """A job this worker claimed: what firing it needs. A named tuple, made
    straight from a claim's row (its columns come in this order); a claim
    makes hundreds at a time."""

    id: uuid.UUID
    attempt: int
    max_attempts: int
    type: str
    scheduled_for: datetime
    run_at: datetime
    timeout_seconds: int
    target: dict[str, Any]
    # The payload as JSON text, as stored. The worker never needs its value:
    # it goes into the firing as it is (no decoding per claim, no encoding
    # per firing, and every number exactly as the client sent it).
    payload_json: str
    lease_until: datetime
    cron_id: uuid.UUID | None = None
    concurrency: str | None = None  # a cron occurrence's policy: ALLOW, FORBID, REPLACE
    deadline_at: datetime | None = None  # a cron occurrence must start by then, or is skipped
    owner: str | None = (
        None  # the owner service: whose grants apply, whose secret signs, the dead-letter metric's label
    )

    @property
    def lease(self) -> Lease:
        return Lease(self.id, self.attempt)

    @property
    def target_kind(self) -> str:
        return str(self.target.get("kind", "?"))


class Lease(NamedTuple):
    """What fences a write: the job and the attempt this worker claimed.

    A named tuple, as is :class:`JobResult`: both are made once per firing,
    and a tuple is made in half the time of a frozen dataclass."""

    id: uuid.UUID
    attempt: int


@dataclass(frozen=True)
class HeartbeatParams:
    leases: tuple[Lease, ...]
    lease_seconds: float
    grace_seconds: float
    now: datetime | None = None


class JobResult(NamedTuple):
    """The outcome of one firing, as the completer writes it."""

    lease: Lease
    outcome: Outcome
    worker: str
    started_at: datetime | None
    lateness_seconds: float | None
    error: str | None = None
    retry_delay: float = 0.0


@dataclass(frozen=True)
class FinishParams:
    results: tuple[JobResult, ...]
    now: datetime | None = None


@dataclass(frozen=True)
class ReapResult:
    rescheduled: int = 0
    failed: int = 0
    # The failed ones as (owner, target kind, how many): dead letters, counted
    # by owner as the worker counts its own.
    failed_by: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True)
class BacklogStats:
    due: int
    oldest_due_age_seconds: float


@dataclass(frozen=True)
class LatenessParams:
    """Start lateness of the attempts that ended in the last ``minutes``
    whole minutes (the current one included), by minute."""

    minutes: int = 15
    now: datetime | None = None  # None: the database's now()


@dataclass(frozen=True)
class LatenessMinute:
    """The attempts that ended in one UTC minute: how many logged a start
    lateness, and its median, 99th percentile and worst (seconds; an
    attempt that started early counts as 0, as the metric does)."""

    minute: datetime
    count: int
    p50_seconds: float
    p99_seconds: float
    max_seconds: float


@dataclass
class MaintenanceResult:
    made_partitions: int = 0
    dropped_partitions: list[str] = field(default_factory=list)
    purged_rows: int = 0
    purged_keys: int = 0
    # The start of the oldest day kept: what finished before it is gone.
    cutoff: datetime | None = None


@dataclass(frozen=True)
class ReleaseParams:
    """Jobs a stopping worker gives back, each fenced by its attempt.

    ``refunds[i]`` marks a job never fired: its attempt does not count
    against ``max_attempts``. Empty means no refunds."""

    leases: tuple[Lease, ...]
    refunds: tuple[bool, ...] = ()
    worker: str | None = None
    now: datetime | None = None  # None: the database's now()

    def __post_init__(self) -> None:
        if self.refunds and len(self.refunds) != len(self.leases):
            raise ValueError("refunds must have one entry per lease")


@dataclass(frozen=True)
class ReapParams:
    limit: int = 1000
    now: datetime | None = None  # None: the database's now()


@dataclass(frozen=True)
class MoveFarParams:
    horizon_seconds: float  # far jobs due before now + this move to the hot table
    limit: int = 1000
    now: datetime | None = None  # None: the database's now()


@dataclass(frozen=True)
class BacklogParams:
    now: datetime | None = None  # None: the database's now()
    # Count at most this many (None: the store's own cap). Who only asks
    # "more than N?" reads N + 1 index entries, not a whole wave's.
    cap: int | None = None


@dataclass(frozen=True)
class OwnerCountsParams:
    """Per owner, how many of its rows a shard holds (pending jobs, cron
    jobs): the ``limit`` owners with the most, for the per-owner quotas."""

    limit: int = 10_000


@dataclass(frozen=True)
class RevokeReplacedParams:
    """Concurrency REPLACE: the cron's RUNNING occurrences other than ``keep``."""

    cron_id: uuid.UUID
    keep: uuid.UUID
    now: datetime | None = None  # None: the database's now()


@dataclass(frozen=True)
class WorkerBeatParams:
    worker_id: str


@dataclass(frozen=True)
class WorkersSeenParams:
    within_seconds: float = WORKER_SEEN_SECONDS


@dataclass(frozen=True)
class MaintainHistoryParams:
    """The janitor's pass. ``today`` comes from its injected clock; None
    takes the database's current UTC date (never the host's wall clock).
    Expired keys go ``batch`` rows a statement, each its own transaction,
    and at most ``batches`` statements a pass."""

    retention_days: int
    today: date | None = None
    days_ahead: int = 7
    batch: int = 10_000
    batches: int = 500
