"""What operators act with: job search, retry, pause and resume, backfill.

The parameter objects of the store operations behind ``GET /jobs``,
``POST /jobs/{id}/retry``, ``…/pause``, ``…/resume`` and
``POST /cron-jobs/{id}/backfill``. Every one carries the owner: a tenant's
token passes its own, an operator's may pass another.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from cluster.model.jobs import JobStatus

__all__ = [
    "RETRYABLE",
    "BackfillParams",
    "BackfillResult",
    "BackfillSlot",
    "JobSearchParams",
    "PauseCronParams",
    "PauseJobParams",
    "ResumeCronParams",
    "ResumeJobParams",
    "RetryJobParams",
]

# What POST /jobs/{id}/retry revives: the dead letters and the cancelled.
RETRYABLE = frozenset({JobStatus.FAILED, JobStatus.CANCELLED})


@dataclass(frozen=True)
class JobSearchParams:
    """A page of ``owner``'s jobs on one shard, newest first: ids below
    ``before`` (the keyset cursor; None from the newest), at most ``limit``.

    Each filter is optional (None: any). ``statuses`` is a set of statuses;
    the ranges are half-open ``[from, to)``; a ``finished_*`` bound leaves
    out jobs not finished; ``labels``: a job has every one of these pairs
    among its labels (exact match)."""

    owner: str
    limit: int = 50
    before: uuid.UUID | None = None
    statuses: tuple[JobStatus, ...] | None = None
    type: str | None = None
    cron_id: uuid.UUID | None = None
    run_at_from: datetime | None = None
    run_at_to: datetime | None = None
    finished_from: datetime | None = None
    finished_to: datetime | None = None
    with_attempts: bool = False
    labels: dict[str, str] | None = None


@dataclass(frozen=True)
class RetryJobParams:
    """A new life for a finished job: back to SCHEDULED at ``run_at`` (None:
    now) with the same id and ``scheduled_for``, a new series of
    ``max_attempts`` attempts (None: the size of its last series). The
    attempt counter goes on from where it was, so every write of an old
    attempt stays fenced. Only ``statuses`` may be revived."""

    id: uuid.UUID
    owner: str
    max_attempts: int | None = None
    run_at: datetime | None = None
    statuses: frozenset[JobStatus] = RETRYABLE
    by: str = "operator"
    now: datetime | None = None


@dataclass(frozen=True)
class PauseJobParams:
    id: uuid.UUID
    owner: str
    reason: str
    now: datetime | None = None


@dataclass(frozen=True)
class ResumeJobParams:
    id: uuid.UUID
    owner: str
    far_horizon_seconds: float = 3600.0
    now: datetime | None = None


@dataclass(frozen=True)
class PauseCronParams:
    """Pause a cron: no slot is materialized while it is paused; its
    occurrences not yet started are withdrawn (as if never materialized)
    and ``next_fire_at`` goes back to the earliest of them."""

    id: uuid.UUID
    owner: str
    reason: str
    now: datetime | None = None


@dataclass(frozen=True)
class ResumeCronParams:
    id: uuid.UUID
    owner: str


@dataclass(frozen=True)
class BackfillSlot:
    """One slot of a backfill: its job (the new one, or the one that has it
    already), and what happened: ``created``, ``exists`` (ran or is pending:
    not doubled), ``rerun`` (ran, revived with a new attempt series)."""

    scheduled_for: datetime
    job_id: uuid.UUID
    outcome: str
    status: JobStatus | None = None  # the existing job's status, for exists and rerun


@dataclass(frozen=True)
class BackfillParams:
    """Occurrences of ``cron_id`` for ``slots`` (past instants), each once by
    (cron_id, scheduled_for): ``job_ids[i]`` is the id a new occurrence of
    ``slots[i]`` gets. They are due at ``run_at``. ``rerun`` revives slots
    that finished; ``dry_run`` writes nothing and says what would happen."""

    cron_id: uuid.UUID
    owner: str
    slots: tuple[datetime, ...]
    job_ids: tuple[uuid.UUID, ...]
    run_at: datetime
    rerun: bool = False
    dry_run: bool = False

    def __post_init__(self) -> None:
        if len(self.slots) != len(self.job_ids):
            raise ValueError("one job id per slot")


@dataclass(frozen=True)
class BackfillResult:
    slots: tuple[BackfillSlot, ...]
