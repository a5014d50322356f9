"""An in-memory store with the PostgreSQL store's semantics, for unit tests
and the fast tier of API tests.

It follows the same state machine and fencing rules as the named queries in
``cluster/store/sql/queries.sql``; time comes from an injected clock instead
of the database's ``now()`` (a params object's ``now`` pins it, as it does the
SQL). ``tests/contract`` runs one suite against this store and PostgreSQL, so
the two cannot drift. Not for production: nothing is durable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cluster.clock import Clock, SystemClock
from cluster.errors import Conflict, IdempotencyKeyReused, NotFound
from cluster.model import (
    AttemptRecord,
    BacklogParams,
    BacklogStats,
    CancelParams,
    ClaimedJob,
    ClaimParams,
    CreateJobParams,
    CreateJobsParams,
    CreateResult,
    DueAheadParams,
    DueSecond,
    FinishParams,
    GetJobParams,
    HeartbeatParams,
    JobRecord,
    JobSearchParams,
    JobStatus,
    LatenessMinute,
    LatenessParams,
    Lease,
    MaintainHistoryParams,
    MaintenanceResult,
    MoveFarParams,
    Outcome,
    OwnerCountsParams,
    PauseJobParams,
    ReapParams,
    ReapResult,
    ReleaseParams,
    RescheduleParams,
    ResumeJobParams,
    RetryJobParams,
    RevokeReplacedParams,
    WorkerBeatParams,
    WorkersSeenParams,
)
from cluster.store.sql import load_migrations

__all__ = ["MemStore"]

# The schema this code expects, as PgStore reports it; the memory store is
# always "migrated" to it.
_LATEST = len(load_migrations())
# max_attempts never grows past the schema's CHECK (refunds on release).
_MAX_ATTEMPTS = 100


@dataclass
class _Row:
    job: JobRecord
    locked_by: str | None = None
    claimed_at: datetime | None = None
    lease_until: datetime | None = None
    far: bool = False


@dataclass
class _Key:
    job_id: uuid.UUID
    fingerprint: str | None
    created_at: datetime


@dataclass
class _Shard:
    rows: dict[uuid.UUID, _Row] = field(default_factory=dict)
    history: dict[uuid.UUID, JobRecord] = field(default_factory=dict)
    attempts: dict[uuid.UUID, list[AttemptRecord]] = field(default_factory=dict)
    keys: dict[tuple[str, str], _Key] = field(default_factory=dict)
    beats: dict[str, datetime] = field(default_factory=dict)


class MemStore:
    """The :class:`~cluster.store.base.Store` contract in memory."""

    latest_schema_version = _LATEST

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

    def _shard(self, shard: int) -> _Shard:
        if not 0 <= shard < self.shard_count:
            raise ValueError(f"shard {shard} out of range 0..{self.shard_count - 1}")
        return self._shards[shard]

    def _now(self, now: datetime | None = None) -> datetime:
        return now or self.clock.now()

    def _log(self, s: _Shard, job_id: uuid.UUID, record: AttemptRecord) -> None:
        s.attempts.setdefault(job_id, []).append(record)

    def _to_history(self, s: _Shard, row: _Row, status: JobStatus, error: str | None, now: datetime) -> JobRecord:
        del s.rows[row.job.id]
        done = dataclasses.replace(
            row.job, status=status, last_error=error or row.job.last_error, finished_at=now,
            paused_at=None, pause_reason=None,
        )
        s.history[done.id] = done
        return done

    @staticmethod
    def _free(row: _Row) -> None:
        row.locked_by = row.lease_until = row.claimed_at = None

    async def schema_version(self, shard: int) -> int:
        self._shard(shard)
        return _LATEST

    # -- API side ---------------------------------------------------------

    def _create(self, s: _Shard, shard: int, params: CreateJobParams) -> CreateResult:
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
                    raise Conflict(
                        "Idempotency-Key belongs to a job whose history has expired",
                        idempotency_key=params.idempotency_key,
                        shard=shard,
                    )
                return CreateResult(existing, created=False)
        if params.id in s.rows:
            # As the tables' primary keys refuse it (and roll back the key).
            constraint = "jobs_far_pkey" if params.far else "jobs_pkey"
            raise Conflict(
                f"unique constraint {constraint} refused the write",
                constraint=constraint,
                shard=shard,
            )
        if params.idempotency_key is not None:
            s.keys[(params.owner, params.idempotency_key)] = _Key(params.id, params.fingerprint, now)
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
            created_at=now,
        )
        s.rows[job.id] = _Row(job, far=params.far)
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

    def _get(self, s: _Shard, job_id: uuid.UUID, owner: str, with_attempts: bool) -> JobRecord | None:
        row = s.rows.get(job_id)
        job = row.job if row else s.history.get(job_id)
        if job is None or job.owner != owner:
            return None
        if with_attempts:
            logged = sorted(s.attempts.get(job_id, ()), key=lambda a: (a.attempt, a.finished_at))
            job = dataclasses.replace(job, attempts=tuple(logged))
        return job

    async def get_job(self, shard: int, params: GetJobParams) -> JobRecord | None:
        return self._get(self._shard(shard), params.id, params.owner, params.with_attempts)

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

    # -- operators --------------------------------------------------------

    async def search_jobs(self, shard: int, params: JobSearchParams) -> list[JobRecord]:
        s = self._shard(shard)
        found: list[JobRecord] = []
        for row in s.rows.values():
            job = dataclasses.replace(row.job, finished_at=None)
            if params.finished_from is None and params.finished_to is None and self._matches(job, params):
                found.append(job)
        found += [j for j in s.history.values() if self._matches(j, params)]
        found.sort(key=lambda j: j.id, reverse=True)
        page = found[: params.limit]
        if params.with_attempts:
            page = [self._get(s, j.id, j.owner, True) or j for j in page]
        return page

    @staticmethod
    def _matches(job: JobRecord, p: JobSearchParams) -> bool:
        def within(t: datetime | None, lo: datetime | None, hi: datetime | None) -> bool:
            if lo is None and hi is None:
                return True
            return t is not None and (lo is None or t >= lo) and (hi is None or t < hi)

        return (
            job.owner == p.owner
            and (p.before is None or job.id < p.before)
            and (p.statuses is None or job.status in p.statuses)
            and (p.type is None or job.type == p.type)
            and (p.cron_id is None or job.cron_id == p.cron_id)
            and within(job.run_at, p.run_at_from, p.run_at_to)
            and within(job.finished_at, p.finished_from, p.finished_to)
        )

    async def retry_job(self, shard: int, params: RetryJobParams) -> JobRecord:
        s = self._shard(shard)
        async with self._lock:
            now = self._now(params.now)
            job = self._get(s, params.id, params.owner, False)
            if job is None:
                raise NotFound("no such job", job_id=str(params.id))
            if job.id in s.rows or job.status not in params.statuses or job.attempt >= _MAX_ATTEMPTS:
                if job.status in params.statuses and job.attempt >= _MAX_ATTEMPTS:
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
                max_attempts=min(job.attempt + budget, _MAX_ATTEMPTS),
                finished_at=None,
            )
            s.rows[job.id] = _Row(revived)
            self._log(
                s,
                job.id,
                AttemptRecord(
                    job.attempt, None, None, now, "RETRIED",
                    f"retried by {params.by}: a new series of {revived.max_attempts - job.attempt} attempts",
                    None,
                ),
            )
            return revived

    def _pausable(self, s: _Shard, job_id: uuid.UUID, owner: str, verb: str) -> _Row:
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

    # -- worker side ------------------------------------------------------

    async def claim_jobs(self, shard: int, params: ClaimParams) -> list[ClaimedJob]:
        s = self._shard(shard)
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
                        owner=j.owner,
                    )
                )
            return out

    async def due_ahead(self, shard: int, params: DueAheadParams) -> list[DueSecond]:
        s = self._shard(shard)
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
        s = self._shard(shard)
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
        s = self._shard(shard)
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
                    self._free(row)
                else:
                    status = {
                        Outcome.SUCCEEDED: JobStatus.SUCCEEDED,
                        Outcome.SKIPPED: JobStatus.SKIPPED,
                    }.get(res.outcome, JobStatus.FAILED)
                    self._to_history(s, row, status, res.error, now)
            return written

    async def release_jobs(self, shard: int, params: ReleaseParams) -> set[uuid.UUID]:
        s = self._shard(shard)
        refunds = params.refunds or (False,) * len(params.leases)
        async with self._lock:
            now = self._now(params.now)
            released = set()
            for lease, refund in zip(params.leases, refunds, strict=True):
                row = self._held(s, lease)
                if row is None:
                    continue
                row.job = dataclasses.replace(
                    row.job,
                    status=JobStatus.SCHEDULED,
                    max_attempts=min(row.job.max_attempts + (1 if refund else 0), _MAX_ATTEMPTS),
                )
                self._free(row)
                if not refund:
                    self._log(
                        s,
                        lease.id,
                        AttemptRecord(
                            lease.attempt, params.worker, None, now, "RELEASED",
                            "worker stopped before the attempt finished", None,
                        ),
                    )
                released.add(lease.id)
            return released

    async def reap_expired(self, shard: int, params: ReapParams) -> ReapResult:
        s = self._shard(shard)
        async with self._lock:
            now = self._now(params.now)
            expired = sorted(
                (
                    r
                    for r in s.rows.values()
                    if r.job.status is JobStatus.RUNNING and r.lease_until is not None and r.lease_until < now
                ),
                key=lambda r: r.lease_until or now,
            )[: params.limit]
            again = dead = 0
            failed_by: dict[tuple[str, str], int] = {}
            for row in expired:
                self._log(
                    s,
                    row.job.id,
                    AttemptRecord(row.job.attempt, row.locked_by, row.claimed_at, now, "LEASE_EXPIRED", "lease expired", None),
                )
                error = f"lease expired (worker {row.locked_by or '?'})"
                if row.job.attempt < row.job.max_attempts:
                    row.job = dataclasses.replace(row.job, status=JobStatus.SCHEDULED, last_error=error)
                    self._free(row)
                    again += 1
                else:
                    self._to_history(s, row, JobStatus.FAILED, error + ", no attempts left", now)
                    dead += 1
                    key = (row.job.owner, str(row.job.target["kind"]))
                    failed_by[key] = failed_by.get(key, 0) + 1
            return ReapResult(
                rescheduled=again,
                failed=dead,
                failed_by=tuple(sorted((o, k, n) for (o, k), n in failed_by.items())),
            )

    async def backlog(self, shard: int, params: BacklogParams) -> BacklogStats:
        now = self._now(params.now)
        due = [
            r.job.run_at
            for r in self._shard(shard).rows.values()
            if not r.far and r.job.status is JobStatus.SCHEDULED and r.job.run_at <= now
        ]
        age = (now - min(due)).total_seconds() if due else 0.0
        counted = len(due) if params.cap is None else min(len(due), params.cap)
        return BacklogStats(due=counted, oldest_due_age_seconds=age)

    async def start_lateness(self, shard: int, params: LatenessParams) -> list[LatenessMinute]:
        now = self._now(params.now)
        since = now.astimezone(UTC).replace(second=0, microsecond=0) - timedelta(
            minutes=params.minutes - 1
        )
        by_minute: dict[datetime, list[float]] = {}
        for logged in self._shard(shard).attempts.values():
            for a in logged:
                if a.lateness_seconds is not None and since <= a.finished_at <= now:
                    minute = a.finished_at.astimezone(UTC).replace(second=0, microsecond=0)
                    by_minute.setdefault(minute, []).append(max(a.lateness_seconds, 0.0))
        out = []
        for minute in sorted(by_minute):
            values = sorted(by_minute[minute])
            out.append(
                LatenessMinute(
                    minute, len(values), _percentile_cont(values, 0.5),
                    _percentile_cont(values, 0.99), values[-1],
                )
            )  # fmt: skip
        return out

    async def pending_by_owner(self, shard: int, params: OwnerCountsParams) -> dict[str, int]:
        counts = Counter(r.job.owner for r in self._shard(shard).rows.values())
        return dict(counts.most_common(params.limit))

    async def move_far_jobs(self, shard: int, params: MoveFarParams) -> int:
        s = self._shard(shard)
        async with self._lock:
            edge = self._now(params.now) + timedelta(seconds=params.horizon_seconds)
            due = sorted(
                (r for r in s.rows.values() if r.far and r.job.paused_at is None and r.job.run_at <= edge),
                key=lambda r: r.job.run_at,
            )
            for row in due[: params.limit]:
                row.far = False
            return min(len(due), params.limit)

    async def revoke_replaced(self, shard: int, params: RevokeReplacedParams) -> int:
        s = self._shard(shard)
        async with self._lock:
            now = self._now(params.now)
            running = [
                r for r in s.rows.values()
                if r.job.cron_id == params.cron_id and r.job.status is JobStatus.RUNNING and r.job.id != params.keep
            ]
            for row in running:
                self._to_history(
                    s, row, JobStatus.CANCELLED, "replaced by a newer occurrence (concurrency REPLACE)", now
                )
            return len(running)

    async def worker_beat(self, shard: int, params: WorkerBeatParams) -> None:
        self._shard(shard).beats[params.worker_id] = self._now()

    async def workers_seen(self, shard: int, params: WorkersSeenParams) -> list[str]:
        since = self._now() - timedelta(seconds=params.within_seconds)
        return sorted(w for w, seen in self._shard(shard).beats.items() if seen > since)

    async def maintain_history(
        self, shard: int, params: MaintainHistoryParams
    ) -> MaintenanceResult:
        """History and attempt-log entries of days past the retention go, as
        PostgreSQL drops their day partitions; so do keys of jobs neither
        pending nor in the history. No partitions to make here."""
        s = self._shard(shard)
        async with self._lock:
            today = params.today or self._now().date()
            cutoff = today - timedelta(days=params.retention_days)
            before = datetime.combine(cutoff, datetime.min.time(), tzinfo=UTC)
            result = MaintenanceResult(cutoff=before)
            for job_id in [i for i, j in s.history.items() if j.finished_at and j.finished_at < before]:
                del s.history[job_id]
                result.purged_rows += 1
            for job_id, logged in list(s.attempts.items()):
                kept = [a for a in logged if a.finished_at >= before]
                result.purged_rows += len(logged) - len(kept)
                if kept:
                    s.attempts[job_id] = kept
                else:
                    del s.attempts[job_id]
            for key in [
                k
                for k, v in s.keys.items()
                if v.created_at < before and v.job_id not in s.rows and v.job_id not in s.history
            ]:
                del s.keys[key]
                result.purged_keys += 1
            return result


def _percentile_cont(ordered: list[float], fraction: float) -> float:
    """PostgreSQL's percentile_cont over sorted values: linear between the
    two nearest ranks."""
    at = fraction * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)
