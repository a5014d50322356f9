"""An in-memory store with the PostgreSQL store's semantics, for unit tests.

It follows the same state machine and fencing rules as the named queries in
``cluster/store/sql/queries.sql``; time comes from an injected clock instead of the
database's ``now()``. Not for production: nothing is durable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cluster.clock import Clock, SystemClock
from cluster.errors import Conflict, NotFound
from cluster.model import (
    AttemptRecord,
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
    JobStatus,
    Lease,
    Outcome,
    ReapResult,
    RescheduleParams,
)
from cluster.store.base import WORKER_SEEN_SECONDS

__all__ = ["MemStore"]


@dataclass
class _Row:
    job: JobRecord
    locked_by: str | None = None
    claimed_at: datetime | None = None
    lease_until: datetime | None = None
    far: bool = False


@dataclass
class _Shard:
    rows: dict[uuid.UUID, _Row] = field(default_factory=dict)
    history: dict[uuid.UUID, JobRecord] = field(default_factory=dict)
    attempts: dict[uuid.UUID, list[AttemptRecord]] = field(default_factory=dict)
    keys: dict[tuple[str, str], tuple[uuid.UUID, str | None]] = field(default_factory=dict)


class MemStore:
    def __init__(self, shard_count: int, clock: Clock | None = None) -> None:
        self.shard_count = shard_count
        self.clock = clock or SystemClock()
        self._shards = [_Shard() for _ in range(shard_count)]
        # One lock stands for the row locks and unique indexes of a database.
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def _now(self, now: datetime | None = None) -> datetime:
        return now or self.clock.now()

    def _log(self, s: _Shard, job_id: uuid.UUID, record: AttemptRecord) -> None:
        s.attempts.setdefault(job_id, []).append(record)

    def _to_history(self, s: _Shard, row: _Row, status: JobStatus, error: str | None, now: datetime) -> JobRecord:
        del s.rows[row.job.id]
        done = dataclasses.replace(
            row.job, status=status, last_error=error or row.job.last_error, finished_at=now
        )
        s.history[done.id] = done
        return done

    async def create_job(self, shard: int, params: CreateJobParams) -> CreateResult:
        s = self._shards[shard]
        async with self._lock:
            if params.idempotency_key is not None:
                key = (params.owner, params.idempotency_key)
                if key in s.keys:
                    first, fingerprint = s.keys[key]
                    if fingerprint != params.fingerprint:
                        raise Conflict("Idempotency-Key was already used with a different request body")
                    existing = self._get(s, first, params.owner, False)
                    assert existing is not None
                    return CreateResult(existing, created=False)
                s.keys[key] = (params.id, params.fingerprint)
            job = JobRecord(
                id=params.id,
                owner=params.owner,
                type=params.type,
                status=JobStatus.SCHEDULED,
                run_at=params.run_at,
                scheduled_for=params.scheduled_for,
                attempt=0,
                max_attempts=params.max_attempts,
                timeout_seconds=params.timeout_seconds,
                target=params.target,
                payload=params.payload,
                idempotency_key=params.idempotency_key,
                cron_id=params.cron_id,
                created_at=self._now(),
            )
            s.rows[job.id] = _Row(job, far=params.far)
            return CreateResult(job, created=True)

    def _get(self, s: _Shard, job_id: uuid.UUID, owner: str, with_attempts: bool) -> JobRecord | None:
        row = s.rows.get(job_id)
        job = row.job if row else s.history.get(job_id)
        if job is None or job.owner != owner:
            return None
        if with_attempts:
            job = dataclasses.replace(job, attempts=tuple(s.attempts.get(job_id, ())))
        return job

    async def get_job(self, shard: int, params: GetJobParams) -> JobRecord | None:
        return self._get(self._shards[shard], params.id, params.owner, params.with_attempts)

    def _scheduled(self, s: _Shard, job_id: uuid.UUID, owner: str, verb: str) -> _Row:
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
        s = self._shards[shard]
        async with self._lock:
            row = self._scheduled(s, params.id, params.owner, "rescheduled")
            row.job = dataclasses.replace(row.job, run_at=params.run_at)
            return row.job

    async def cancel_job(self, shard: int, params: CancelParams) -> JobRecord:
        s = self._shards[shard]
        async with self._lock:
            row = self._scheduled(s, params.id, params.owner, "cancelled")
            return self._to_history(s, row, JobStatus.CANCELLED, None, self._now(params.now))

    async def claim_jobs(self, shard: int, params: ClaimParams) -> list[ClaimedJob]:
        s = self._shards[shard]
        async with self._lock:
            now = self._now(params.now)
            if params.window is None:
                lo = datetime.min.replace(tzinfo=UTC)
                hi = now + timedelta(seconds=params.prefetch_seconds, microseconds=1)
            else:
                lo, hi = params.window
            due = sorted(
                (r for r in s.rows.values() if not r.far and r.job.status is JobStatus.SCHEDULED and lo <= r.job.run_at < hi),
                key=lambda r: r.job.run_at,
            )[: params.limit]
            out = []
            for row in due:
                job = row.job
                lease = min(job.timeout_seconds, params.lease_seconds) + params.grace_seconds
                row.job = dataclasses.replace(job, status=JobStatus.RUNNING, attempt=job.attempt + 1)
                row.locked_by = params.worker_id
                row.claimed_at = now
                row.lease_until = max(job.run_at, now) + timedelta(seconds=lease)
                j = row.job
                out.append(
                    ClaimedJob(
                        id=j.id,
                        attempt=j.attempt,
                        max_attempts=j.max_attempts,
                        type=j.type,
                        scheduled_for=j.scheduled_for,
                        run_at=j.run_at,
                        timeout_seconds=j.timeout_seconds,
                        target=j.target,
                        payload_json=json.dumps(j.payload),
                        lease_until=row.lease_until,
                        cron_id=j.cron_id,
                    )
                )
            return out

    async def due_ahead(self, shard: int, params: DueAheadParams) -> list[DueSecond]:
        s = self._shards[shard]
        async with self._lock:
            now = self._now(params.now)
            horizon = now + timedelta(seconds=params.horizon_seconds)
            ahead = sorted(
                r.job.run_at for r in s.rows.values()
                if not r.far and r.job.status is JobStatus.SCHEDULED and now < r.job.run_at <= horizon
            )[: params.limit]
            counts: dict[datetime, int] = {}
            for run_at in ahead:
                second = run_at.replace(microsecond=0)
                counts[second] = counts.get(second, 0) + 1
            return [DueSecond(at, n) for at, n in counts.items()]

    def _held(self, s: _Shard, lease: Lease) -> _Row | None:
        row = s.rows.get(lease.id)
        if row and row.job.status is JobStatus.RUNNING and row.job.attempt == lease.attempt:
            return row
        return None

    async def heartbeat(self, shard: int, params: HeartbeatParams) -> set[uuid.UUID]:
        s = self._shards[shard]
        async with self._lock:
            now = self._now(params.now)
            kept = set()
            for lease in params.leases:
                row = self._held(s, lease)
                if row is not None and row.lease_until is not None:
                    extended = now + timedelta(seconds=params.lease_seconds + params.grace_seconds)
                    row.lease_until = max(row.lease_until, extended)
                    kept.add(lease.id)
            return kept

    async def finish_jobs(self, shard: int, params: FinishParams) -> set[uuid.UUID]:
        s = self._shards[shard]
        async with self._lock:
            now = self._now(params.now)
            written = set()
            for res in params.results:
                row = self._held(s, res.lease)
                if row is None:
                    continue
                written.add(res.lease.id)
                outcome = {Outcome.SUCCEEDED: "SUCCEEDED", Outcome.SKIPPED: "SKIPPED"}.get(
                    res.outcome, "ERROR"
                )
                self._log(
                    s,
                    res.lease.id,
                    AttemptRecord(res.lease.attempt, res.worker, res.started_at, now, outcome, res.error, res.lateness_seconds),
                )
                if res.outcome is Outcome.RETRY:
                    row.job = dataclasses.replace(
                        row.job,
                        status=JobStatus.SCHEDULED,
                        run_at=now + timedelta(seconds=res.retry_delay),
                        last_error=res.error,
                    )
                    row.locked_by = row.lease_until = row.claimed_at = None
                else:
                    status = {
                        Outcome.SUCCEEDED: JobStatus.SUCCEEDED,
                        Outcome.SKIPPED: JobStatus.SKIPPED,
                    }.get(res.outcome, JobStatus.FAILED)
                    self._to_history(s, row, status, res.error, now)
            return written

    async def release_jobs(
        self,
        shard: int,
        leases: list[Lease],
        refunds: list[bool] | None = None,
        worker: str | None = None,
    ) -> set[uuid.UUID]:
        s = self._shards[shard]
        refunds = refunds or [False] * len(leases)
        async with self._lock:
            released = set()
            for lease, refund in zip(leases, refunds, strict=True):
                row = self._held(s, lease)
                if row is None:
                    continue
                row.job = dataclasses.replace(
                    row.job,
                    status=JobStatus.SCHEDULED,
                    max_attempts=min(row.job.max_attempts + (1 if refund else 0), 100),
                )
                row.locked_by = row.lease_until = row.claimed_at = None
                released.add(lease.id)
            return released

    async def reap_expired(self, shard: int, limit: int = 1000, now: datetime | None = None) -> ReapResult:
        s = self._shards[shard]
        async with self._lock:
            now = self._now(now)
            expired = [
                r
                for r in s.rows.values()
                if r.job.status is JobStatus.RUNNING and r.lease_until is not None and r.lease_until < now
            ][:limit]
            again = dead = 0
            for row in expired:
                self._log(
                    s,
                    row.job.id,
                    AttemptRecord(row.job.attempt, row.locked_by, row.claimed_at, now, "LEASE_EXPIRED", "lease expired", None),
                )
                error = f"lease expired (worker {row.locked_by or '?'})"
                if row.job.attempt < row.job.max_attempts:
                    row.job = dataclasses.replace(row.job, status=JobStatus.SCHEDULED, last_error=error)
                    row.locked_by = row.lease_until = row.claimed_at = None
                    again += 1
                else:
                    self._to_history(s, row, JobStatus.FAILED, error + ", no attempts left", now)
                    dead += 1
            return ReapResult(rescheduled=again, failed=dead)

    async def backlog(self, shard: int, now: datetime | None = None) -> BacklogStats:
        now = self._now(now)
        due = [
            r.job.run_at
            for r in self._shards[shard].rows.values()
            if not r.far and r.job.status is JobStatus.SCHEDULED and r.job.run_at <= now
        ]
        age = (now - min(due)).total_seconds() if due else 0.0
        return BacklogStats(due=len(due), oldest_due_age_seconds=age)

    async def move_far_jobs(
        self, shard: int, horizon_seconds: float, limit: int = 1000, now: datetime | None = None
    ) -> int:
        edge = self._now(now) + timedelta(seconds=horizon_seconds)
        moved = 0
        async with self._lock:
            for row in self._shards[shard].rows.values():
                if row.far and row.job.run_at <= edge and moved < limit:
                    row.far = False
                    moved += 1
        return moved

    async def revoke_replaced(self, shard: int, cron_id: uuid.UUID, keep: uuid.UUID) -> int:
        s = self._shards[shard]
        async with self._lock:
            running = [
                r for r in s.rows.values()
                if r.job.cron_id == cron_id and r.job.status is JobStatus.RUNNING and r.job.id != keep
            ]
            for row in running:
                self._to_history(s, row, JobStatus.CANCELLED, "replaced by a newer occurrence", self._now())
            return len(running)

    async def worker_beat(self, shard: int, worker_id: str) -> None:
        return None

    async def workers_seen(self, shard: int, within_seconds: float = WORKER_SEEN_SECONDS) -> list[str]:
        return []
