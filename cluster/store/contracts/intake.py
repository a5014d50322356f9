"""The API's intake: a client's job writes and reads (STYLE.md item 17)."""

from __future__ import annotations

from typing import Protocol

from cluster.errors import Conflict
from cluster.model import (
    CancelParams,
    CreateJobParams,
    CreateJobsParams,
    CreateResult,
    GetJobParams,
    JobRecord,
    PauseJobParams,
    RescheduleParams,
    ResumeJobParams,
    RetryJobParams,
)
from cluster.store.contracts.sharded import Sharded

__all__ = ["JobIntake"]


class JobIntake(Sharded, Protocol):
    """Create, read and change one owner's jobs.

    Implementations raise only :mod:`cluster.errors` exceptions: no driver
    error crosses this seam."""

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
