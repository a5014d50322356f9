"""The API's intake in memory: create, read and change one job."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

from cluster.errors import Conflict, IdempotencyKeyExpired, IdempotencyKeyReused, NotFound
from cluster.model import (
    AttemptRecord,
    CancelParams,
    CreateJobParams,
    CreateJobsParams,
    CreateResult,
    GetJobParams,
    JobRecord,
    JobStatus,
    PauseJobParams,
    RescheduleParams,
    ResumeJobParams,
    RetryJobParams,
)
from cluster.model.columns import record_from_params
from cluster.store.memory.shards import MAX_ATTEMPTS, MemKey, MemRow, MemShard, MemShards

__all__ = ["MemIntake"]


class MemIntake(MemShards):
    """:class:`~cluster.store.contracts.intake.JobIntake` in memory."""

    def _create(self, s: MemShard, shard: int, params: CreateJobParams) -> CreateResult:
        """One create, under the lock; raises the Conflict create_job raises."""
        now = self._now()
        if params.idempotency_key is not None:
            key = (params.owner, params.idempotency_key)
            found = s.keys.get(key)
            if found is not None:
                if found.fingerprint != params.fingerprint:
                    raise IdempotencyKeyReused(
                        "Idempotency-Key was already used with a different request body; "
                        "use a new key for a different job",
                        idempotency_key=params.idempotency_key,
                        shard=shard,
                    )
                existing = self._get(s, found.job_id, params.owner, False)
                if existing is None:
                    raise IdempotencyKeyExpired(
                        "Idempotency-Key belongs to a job whose history has expired",
                        found.job_id,
                        idempotency_key=params.idempotency_key,
                        shard=shard,
                    )
                return CreateResult(existing, created=False)
        far = params.far
        if params.far_horizon_seconds is not None:
            # Placed on the store's clock, as PostgreSQL places it on now().
            far = params.run_at > now + timedelta(seconds=params.far_horizon_seconds)
        if params.id in s.rows:
            # As the tables' primary keys refuse it (and roll back the key).
            constraint = "jobs_far_pkey" if far else "jobs_pkey"
            raise Conflict(
                f"unique constraint {constraint} refused the write",
                constraint=constraint,
                shard=shard,
            )
        if params.idempotency_key is not None:
            s.keys[(params.owner, params.idempotency_key)] = MemKey(
                params.id, params.fingerprint, now
            )
        job = record_from_params(params, created_at=now)
        s.rows[job.id] = MemRow(job, far=far)
        # What PgStore returns for a new job: the record as asked, no
        # database defaults read back.
        return CreateResult(dataclasses.replace(job, created_at=None), created=True)

    async def create_job(self, shard: int, params: CreateJobParams) -> CreateResult:
        s = self._shard(shard)
        async with self._lock:
            return self._create(s, shard, params)

    async def create_jobs(
        self, shard: int, params: CreateJobsParams
    ) -> list[CreateResult | Conflict]:
        s = self._shard(shard)
        out: list[CreateResult | Conflict] = []
        async with self._lock:
            # One statement in PostgreSQL: a refused id undoes the whole batch.
            rows, keys = dict(s.rows), dict(s.keys)
            # In order, under one lock: a key's second use in the batch meets
            # the first's ledger entry, as it would meet a committed one.
            for p in params.jobs:
                try:
                    out.append(self._create(s, shard, p))
                except Conflict as exc:
                    if "constraint" in exc.fields:
                        s.rows, s.keys = rows, keys
                        raise
                    out.append(exc)
        return out

    async def get_job(self, shard: int, params: GetJobParams) -> JobRecord | None:
        return self._get(self._shard(shard), params.id, params.owner, params.with_attempts)

    def _scheduled(self, s: MemShard, job_id: uuid.UUID, owner: str, verb: str) -> MemRow:
        row = s.rows.get(job_id)
        job = row.job if row else s.history.get(job_id)
        if job is None or job.owner != owner:
            raise NotFound("no such job", job_id=str(job_id))
        if row is None or job.status is not JobStatus.SCHEDULED:
            raise Conflict(
                f"job is {job.status.value}; it can be {verb} only while SCHEDULED",
                job_id=str(job_id),
                job_status=job.status.value,
            )
        return row

    async def reschedule_job(self, shard: int, params: RescheduleParams) -> JobRecord:
        s = self._shard(shard)
        async with self._lock:
            row = self._scheduled(s, params.id, params.owner, "rescheduled")
            row.job = dataclasses.replace(row.job, run_at=params.run_at)
            return row.job

    async def cancel_job(self, shard: int, params: CancelParams) -> JobRecord:
        s = self._shard(shard)
        async with self._lock:
            row = self._scheduled(s, params.id, params.owner, "cancelled")
            return self._to_history(s, row, JobStatus.CANCELLED, None, self._now(params.now))

    async def retry_job(self, shard: int, params: RetryJobParams) -> JobRecord:
        s = self._shard(shard)
        async with self._lock:
            now = self._now(params.now)
            job = self._get(s, params.id, params.owner, False)
            if job is None:
                raise NotFound("no such job", job_id=str(params.id))
            if job.id in s.rows or job.status not in params.statuses or job.attempt >= MAX_ATTEMPTS:
                if job.status in params.statuses and job.attempt >= MAX_ATTEMPTS:
                    raise Conflict(
                        "job has used the 100 attempts a job may have over all its lives",
                        job_id=str(job.id),
                        job_status=job.status.value,
                    )
                allowed = " or ".join(sorted(x.value for x in params.statuses))
                raise Conflict(
                    f"job is {job.status.value}; only a {allowed} job can be retried",
                    job_id=str(job.id),
                    job_status=job.status.value,
                )
            # The size of the last series: since the last RETRIED mark.
            base = max(
                (a.attempt for a in s.attempts.get(job.id, ()) if a.outcome == "RETRIED"), default=0
            )
            budget = params.max_attempts or max(job.max_attempts - base, 1)
            del s.history[job.id]
            revived = dataclasses.replace(
                job,
                status=JobStatus.SCHEDULED,
                run_at=params.run_at or now,
                max_attempts=min(job.attempt + budget, MAX_ATTEMPTS),
                finished_at=None,
            )
            s.rows[job.id] = MemRow(revived)
            self._log(
                s,
                job.id,
                AttemptRecord(
                    job.attempt,
                    None,
                    None,
                    now,
                    "RETRIED",
                    f"retried by {params.by}: a new series of {revived.max_attempts - job.attempt} attempts",
                    None,
                ),
            )
            return revived

    def _pausable(self, s: MemShard, job_id: uuid.UUID, owner: str, verb: str) -> MemRow:
        """:meth:`_scheduled`, and not a cron occurrence (its cron pauses it)."""
        row = s.rows.get(job_id)
        job = row.job if row else s.history.get(job_id)
        if job is not None and job.owner == owner and job.cron_id is not None:
            raise Conflict(
                f"a cron job's occurrence cannot be {verb} alone; pause or resume its cron job",
                job_id=str(job_id),
            )
        return self._scheduled(s, job_id, owner, verb)

    async def pause_job(self, shard: int, params: PauseJobParams) -> JobRecord:
        s = self._shard(shard)
        async with self._lock:
            row = self._pausable(s, params.id, params.owner, "paused")
            if row.job.paused_at is None:
                # In the far table, where neither the claim nor the mover looks.
                row.far = True
                row.job = dataclasses.replace(
                    row.job, paused_at=self._now(params.now), pause_reason=params.reason
                )
            return row.job

    async def resume_job(self, shard: int, params: ResumeJobParams) -> JobRecord:
        s = self._shard(shard)
        async with self._lock:
            row = self._pausable(s, params.id, params.owner, "resumed")
            row.job = dataclasses.replace(row.job, paused_at=None, pause_reason=None)
            edge = self._now(params.now) + timedelta(seconds=params.far_horizon_seconds)
            if row.far and row.job.run_at <= edge:
                row.far = False
            return row.job
