"""The operator's reads in memory: search, lateness, pending per owner."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import UTC, datetime, timedelta

from cluster.model import (
    JobRecord,
    JobSearchParams,
    LatenessMinute,
    LatenessParams,
    OwnerCountsParams,
)
from cluster.store.memory.upkeep import MemUpkeep

__all__ = ["MemInsight"]


def _percentile_cont(ordered: list[float], fraction: float) -> float:
    """PostgreSQL's percentile_cont over sorted values: linear between the
    two nearest ranks."""
    at = fraction * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


class MemInsight(MemUpkeep):
    """:class:`~cluster.store.contracts.insight.JobInsight` in memory (its
    backlog is the upkeep's)."""

    async def search_jobs(self, shard: int, params: JobSearchParams) -> list[JobRecord]:
        s = self._shard(shard)
        found: list[JobRecord] = []
        for row in s.rows.values():
            job = dataclasses.replace(row.job, finished_at=None)
            if (
                params.finished_from is None
                and params.finished_to is None
                and self._matches(job, params)
            ):
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
            and (not p.labels or p.labels.items() <= (job.labels or {}).items())
            and within(job.run_at, p.run_at_from, p.run_at_to)
            and within(job.finished_at, p.finished_from, p.finished_to)
        )

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
