"""The rest of the API's intake on PostgreSQL: read, reschedule, cancel,
retry, pause and resume one job."""

from __future__ import annotations

import uuid
from typing import Any

from cluster.errors import Conflict, NotFound
from cluster.model import (
    CancelParams,
    GetJobParams,
    JobRecord,
    JobStatus,
    PauseJobParams,
    RescheduleParams,
    ResumeJobParams,
    RetryJobParams,
)
from cluster.store.pgshards import wrap_exceptions
from cluster.store.postgres.creates import PgCreates
from cluster.store.postgres.rows import fetch_job
from cluster.store.sql import QUERIES

__all__ = ["PgIntake"]


def _not_retryable(job: JobRecord, params: RetryJobParams) -> Conflict:
    if job.status in params.statuses and job.attempt >= 100:
        return Conflict(
            "job has used the 100 attempts a job may have over all its lives",
            job_id=str(job.id),
            job_status=job.status.value,
        )
    allowed = " or ".join(sorted(x.value for x in params.statuses))
    return Conflict(
        f"job is {job.status.value}; only a {allowed} job can be retried",
        job_id=str(job.id),
        job_status=job.status.value,
    )


def _paused_or_refused(job: JobRecord | None, job_id: uuid.UUID, *, paused: bool) -> JobRecord:
    """Pause and resume are idempotent: a paused job paused again (a resumed
    one resumed again) is returned as it is. A job that is not SCHEDULED, or
    a cron occurrence (pause its cron), is a Conflict."""
    if job is None:
        raise NotFound("no such job", job_id=str(job_id))
    verb = "paused" if paused else "resumed"
    if job.cron_id is not None:
        raise Conflict(
            f"a cron job's occurrence cannot be {verb} alone; pause or resume its cron job",
            job_id=str(job_id),
        )
    if job.status is not JobStatus.SCHEDULED:
        raise Conflict(
            f"job is {job.status.value}; it can be {verb} only while SCHEDULED",
            job_id=str(job_id),
            job_status=job.status.value,
        )
    return job


class PgIntake(PgCreates):
    """:class:`~cluster.store.contracts.intake.JobIntake` on PostgreSQL shards."""

    @wrap_exceptions
    async def get_job(self, shard: int, params: GetJobParams) -> JobRecord | None:
        async with self.connection(shard) as conn:
            return await fetch_job(conn, params.id, params.owner, params.with_attempts)

    async def _change(
        self,
        shard: int,
        job_id: uuid.UUID,
        owner: str,
        names: tuple[str, str],
        params: dict[str, Any],
        verb: str,
    ) -> JobRecord:
        async with self.connection(shard) as conn:
            # Far first, then near: the direction a job moves in, so a job the
            # mover carries over between the two statements is still found.
            for name in names:
                cur = await conn.execute(QUERIES[name], params)
                if await cur.fetchone() is not None:
                    job = await fetch_job(conn, job_id, owner, with_attempts=False)
                    assert job is not None
                    return job
            job = await fetch_job(conn, job_id, owner, with_attempts=False)
        if job is None:
            raise NotFound("no such job", job_id=str(job_id))
        raise Conflict(
            f"job is {job.status.value}; it can be {verb} only while SCHEDULED",
            job_id=str(job_id),
            job_status=job.status.value,
        )

    @wrap_exceptions
    async def reschedule_job(self, shard: int, params: RescheduleParams) -> JobRecord:
        return await self._change(
            shard,
            params.id,
            params.owner,
            ("reschedule_far_job", "reschedule_job"),
            {"id": params.id, "owner": params.owner, "run_at": params.run_at},
            "rescheduled",
        )

    @wrap_exceptions
    async def cancel_job(self, shard: int, params: CancelParams) -> JobRecord:
        return await self._change(
            shard,
            params.id,
            params.owner,
            ("cancel_far_job", "cancel_job"),
            {"id": params.id, "owner": params.owner, "now": params.now},
            "cancelled",
        )

    @wrap_exceptions
    async def retry_job(self, shard: int, params: RetryJobParams) -> JobRecord:
        args = {
            "id": params.id,
            "owner": params.owner,
            "statuses": sorted(x.value for x in params.statuses),
            "max_attempts": params.max_attempts,
            "run_at": params.run_at,
            "by": params.by,
            "now": params.now,
        }
        async with self.connection(shard) as conn:
            cur = await conn.execute(QUERIES["retry_job"], args)
            revived = await cur.fetchone() is not None
            job = await fetch_job(conn, params.id, params.owner, with_attempts=False)
        if job is None:
            raise NotFound("no such job", job_id=str(params.id))
        if not revived:
            raise _not_retryable(job, params)
        return job

    @wrap_exceptions
    async def pause_job(self, shard: int, params: PauseJobParams) -> JobRecord:
        args = {"id": params.id, "owner": params.owner, "reason": params.reason, "now": params.now}
        async with self.connection(shard) as conn, conn.transaction():
            cur = await conn.execute(QUERIES["pause_far_job"], args)
            if await cur.fetchone() is None:
                cur = await conn.execute(QUERIES["move_job_far"], args)
                if await cur.fetchone() is not None:
                    await conn.execute(QUERIES["pause_far_job"], args)
            job = await fetch_job(conn, params.id, params.owner, with_attempts=False)
        return _paused_or_refused(job, params.id, paused=True)

    @wrap_exceptions
    async def resume_job(self, shard: int, params: ResumeJobParams) -> JobRecord:
        args = {
            "id": params.id,
            "owner": params.owner,
            "now": params.now,
            "horizon": params.far_horizon_seconds,
        }
        async with self.connection(shard) as conn, conn.transaction():
            await conn.execute(QUERIES["resume_far_job"], args)
            await conn.execute(QUERIES["move_job_near"], args)
            job = await fetch_job(conn, params.id, params.owner, with_attempts=False)
        return _paused_or_refused(job, params.id, paused=False)
