"""Limits that hold across the cluster, in memory: what
cluster/store/postgres/limits.py does on a shard, for the unit tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cluster.model import (
    AdmittedJob,
    JobStatus,
    LimitedClaimParams,
    LimitSetting,
    SetLimitParams,
    admit,
    shard_share,
)
from cluster.store.memory.claims import MemClaims
from cluster.targets.kinds import KINDS

__all__ = ["MemLimits"]

_NEVER = datetime.min.replace(tzinfo=UTC)


class MemLimits(MemClaims):
    """:class:`~cluster.store.contracts.limits.LimitedClaims` in memory."""

    async def claim_limited(self, shard: int, params: LimitedClaimParams) -> list[AdmittedJob]:
        s = self._shard(shard)
        async with self._lock:
            now = self._now(params.now)
            share = shard_share(params.limit, params.shards)
            key = params.key
            mine = [
                r for r in s.rows.values() if not r.far and KINDS.limit_key(r.job.target) == key
            ]
            running = sum(
                1
                for r in mine
                if r.job.status is JobStatus.RUNNING
                and r.lease_until is not None
                and r.lease_until > now
            )
            room = admit(
                share,
                tat=s.buckets.get(key, _NEVER),
                now=now,
                running=running,
                horizon=params.horizon_seconds,
                most=params.most,
            )
            due = sorted(
                (r for r in mine if r.job.status is JobStatus.SCHEDULED and r.job.run_at <= now),
                key=lambda r: r.job.run_at,
            )[: room.count]
            lease = timedelta(seconds=params.horizon_seconds + params.grace_seconds)
            out = []
            for i, row in enumerate(due):
                until = (
                    now
                    + lease
                    + timedelta(seconds=min(row.job.timeout_seconds, params.lease_seconds))
                )
                out.append(
                    AdmittedJob(
                        self._take_row(row, params.worker_id, now, until), room.start(i, now)
                    )
                )
            if share.interval is not None:
                s.buckets[key] = room.tat(len(out))
            return out

    async def count_waiting(self, shard: int, keys: list[str]) -> dict[str, int]:
        s = self._shard(shard)
        now = self._now()
        out: dict[str, int] = {}
        for r in s.rows.values():
            if r.far or r.job.status is not JobStatus.SCHEDULED or r.job.run_at > now:
                continue
            key = KINDS.limit_key(r.job.target)
            if key in keys:
                out[key] = out.get(key, 0) + 1
        return out

    async def slow_limit(self, shard: int, key: str, until: datetime) -> None:
        s = self._shard(shard)
        s.buckets[key] = max(s.buckets.get(key, _NEVER), until)

    async def read_limits(self, shard: int) -> list[LimitSetting]:
        s = self._shard(shard)
        return [s.limits[k] for k in sorted(s.limits)]

    async def set_limit(self, shard: int, params: SetLimitParams) -> None:
        s = self._shard(shard)
        if params.limit is None:
            s.limits.pop(params.key, None)
        else:
            s.limits[params.key] = LimitSetting(params.key, params.limit, self._now())
