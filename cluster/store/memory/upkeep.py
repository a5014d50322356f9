"""The leader loops' contract in memory: reaper, mover, janitor, backlog."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from cluster.model import (
    AttemptRecord,
    BacklogParams,
    BacklogStats,
    JobStatus,
    MaintainHistoryParams,
    MaintenanceResult,
    MoveFarParams,
    ReapParams,
    ReapResult,
)
from cluster.store.memory.shards import MemShards

__all__ = ["MemUpkeep"]


class MemUpkeep(MemShards):
    """:class:`~cluster.store.contracts.upkeep.JobUpkeep` in memory."""

    async def reap_expired(self, shard: int, params: ReapParams) -> ReapResult:
        s = self._shard(shard)
        async with self._lock:
            now = self._now(params.now)
            expired = sorted(
                (
                    r
                    for r in s.rows.values()
                    if r.job.status is JobStatus.RUNNING
                    and r.lease_until is not None
                    and r.lease_until < now
                ),
                key=lambda r: r.lease_until or now,
            )[: params.limit]
            again = dead = 0
            failed_by: dict[tuple[str, str], int] = {}
            for row in expired:
                self._log(
                    s,
                    row.job.id,
                    AttemptRecord(
                        row.job.attempt,
                        row.locked_by,
                        row.claimed_at,
                        now,
                        "LEASE_EXPIRED",
                        "lease expired",
                        None,
                    ),
                )
                error = f"lease expired (worker {row.locked_by or '?'})"
                if row.job.attempt < row.job.max_attempts:
                    row.job = dataclasses.replace(
                        row.job, status=JobStatus.SCHEDULED, last_error=error
                    )
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

    async def move_far_jobs(self, shard: int, params: MoveFarParams) -> int:
        s = self._shard(shard)
        async with self._lock:
            edge = self._now(params.now) + timedelta(seconds=params.horizon_seconds)
            due = sorted(
                (
                    r
                    for r in s.rows.values()
                    if r.far and r.job.paused_at is None and r.job.run_at <= edge
                ),
                key=lambda r: r.job.run_at,
            )
            for row in due[: params.limit]:
                row.far = False
            return min(len(due), params.limit)

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
            for job_id in [
                i for i, j in s.history.items() if j.finished_at and j.finished_at < before
            ]:
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
