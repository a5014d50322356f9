"""The worker's contract in memory: claims, forecast, heartbeats, completions."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, datetime, timedelta

from cluster.model import (
    AttemptRecord,
    ClaimedJob,
    ClaimParams,
    DueAheadParams,
    DueSecond,
    FinishParams,
    HeartbeatParams,
    JobStatus,
    Lease,
    Outcome,
    ReleaseParams,
    RevokeReplacedParams,
    WorkerBeatParams,
    WorkersSeenParams,
)
from cluster.store.memory.shards import MAX_ATTEMPTS, MemRow, MemShard, MemShards
from cluster.targets.kinds import KINDS

__all__ = ["MemClaims"]


class MemClaims(MemShards):
    """:class:`~cluster.store.contracts.claims.JobClaims` in memory."""

    async def claim_jobs(self, shard: int, params: ClaimParams) -> list[ClaimedJob]:
        s = self._shard(shard)
        async with self._lock:
            now = self._now(params.now)
            if params.window is None:
                lo = datetime.min.replace(tzinfo=UTC)
                hi = now + timedelta(seconds=params.prefetch_seconds, microseconds=1)
            else:
                lo, hi = params.window
            limited = set(params.limited)
            due = sorted(
                (
                    r
                    for r in s.rows.values()
                    if not r.far
                    and r.job.status is JobStatus.SCHEDULED
                    and lo <= r.job.run_at < hi
                    and not (limited and KINDS.limit_key(r.job.target) in limited)
                ),
                key=lambda r: r.job.run_at,
            )[: params.limit]
            out = []
            for row in due:
                job = row.job
                lease = min(job.timeout_seconds, params.lease_seconds) + params.grace_seconds
                out.append(
                    self._take_row(
                        row, params.worker_id, now, max(job.run_at, now) + timedelta(seconds=lease)
                    )
                )
            return out

    def _take_row(
        self, row: MemRow, worker_id: str, now: datetime, lease_until: datetime
    ) -> ClaimedJob:
        """``row`` claimed: RUNNING with a new attempt and a lease."""
        job = row.job
        row.job = dataclasses.replace(job, status=JobStatus.RUNNING, attempt=job.attempt + 1)
        row.locked_by = worker_id
        row.claimed_at = now
        row.lease_until = lease_until
        j = row.job
        return ClaimedJob(
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

    async def due_ahead(self, shard: int, params: DueAheadParams) -> list[DueSecond]:
        s = self._shard(shard)
        async with self._lock:
            now = self._now(params.now)
            horizon = now + timedelta(seconds=params.horizon_seconds)
            ahead = sorted(
                r.job.run_at
                for r in s.rows.values()
                if not r.far
                and r.job.status is JobStatus.SCHEDULED
                and now < r.job.run_at <= horizon
            )[: params.limit]
            counts: dict[datetime, int] = {}
            for run_at in ahead:
                second = run_at.replace(microsecond=0)
                counts[second] = counts.get(second, 0) + 1
            return [DueSecond(at, n) for at, n in counts.items()]

    def _held(self, s: MemShard, lease: Lease) -> MemRow | None:
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
                    AttemptRecord(
                        res.lease.attempt,
                        res.worker,
                        res.started_at,
                        now,
                        outcome,
                        res.error,
                        res.lateness_seconds,
                    ),
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
                    max_attempts=min(row.job.max_attempts + (1 if refund else 0), MAX_ATTEMPTS),
                )
                self._free(row)
                if not refund:
                    self._log(
                        s,
                        lease.id,
                        AttemptRecord(
                            lease.attempt,
                            params.worker,
                            None,
                            now,
                            "RELEASED",
                            "worker stopped before the attempt finished",
                            None,
                        ),
                    )
                released.add(lease.id)
            return released

    async def revoke_replaced(self, shard: int, params: RevokeReplacedParams) -> int:
        s = self._shard(shard)
        async with self._lock:
            now = self._now(params.now)
            running = [
                r
                for r in s.rows.values()
                if r.job.cron_id == params.cron_id
                and r.job.status is JobStatus.RUNNING
                and r.job.id != params.keep
            ]
            for row in running:
                self._to_history(
                    s,
                    row,
                    JobStatus.CANCELLED,
                    "replaced by a newer occurrence (concurrency REPLACE)",
                    now,
                )
            return len(running)

    async def worker_beat(self, shard: int, params: WorkerBeatParams) -> None:
        self._shard(shard).beats[params.worker_id] = self._now()

    async def workers_seen(self, shard: int, params: WorkersSeenParams) -> list[str]:
        since = self._now() - timedelta(seconds=params.within_seconds)
        return sorted(w for w, seen in self._shard(shard).beats.items() if seen > since)
