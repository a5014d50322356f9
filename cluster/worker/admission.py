"""The worker's side of limits that hold across the cluster (issue 44,
docs/design/limits.md): which keys are limited on a shard, and claiming their
jobs through the shard's share (:mod:`cluster.model.limits`).

The limits in force on a shard are the configured ones
(``VAKIT_TARGET_LIMITS``) overlaid by the run-time ones the shard holds
(``PUT /api/v1/limits/{key}``), re-read every few seconds: a change reaches
every worker within that time, without a restart. A worker that cannot read
a shard's run-time limits keeps the last ones it read (the fallback state,
exported as a metric); the shard is then unreachable for claims too, so no
job is admitted under a limit it did not see for long.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from cluster import metrics
from cluster.model import (
    AdmittedJob,
    LimitedClaimParams,
    TargetLimit,
    effective_concurrency,
)
from cluster.store.contracts.claims import JobClaims

__all__ = ["LIMITS_REFRESH_SECONDS", "LimitBook"]

# How often a worker re-reads a shard's run-time limits and counts the jobs
# they hold back: the most a limit change waits before it applies.
LIMITS_REFRESH_SECONDS = 2.0

log = logging.getLogger(__name__)


@dataclass
class _ShardLimits:
    overrides: dict[str, TargetLimit] = field(default_factory=dict)
    read_at: float = float("-inf")
    waiting: dict[str, int] = field(default_factory=dict)


class LimitBook:
    """The limits in force on each shard, kept fresh from the store."""

    def __init__(
        self,
        configured: dict[str, TargetLimit],
        store: JobClaims,
        *,
        refresh: float = LIMITS_REFRESH_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.configured = {k: v for k, v in configured.items()}
        self.store = store
        self._refresh = refresh
        self._monotonic = monotonic
        self._shards: dict[int, _ShardLimits] = {}
        self._slowed_until: dict[str, datetime] = {}

    def in_force(self, shard: int) -> dict[str, TargetLimit]:
        """The keys limited on ``shard`` now, with their limits."""
        state = self._shards.get(shard)
        merged = dict(self.configured)
        if state is not None:
            merged.update(state.overrides)
        return {k: v for k, v in merged.items() if v.limited}

    def any_in_force(self) -> bool:
        """Whether some key is limited on some shard."""
        return any(self.in_force(shard) for shard in self._shards)

    async def refresh(self, shard: int) -> dict[str, TargetLimit]:
        """:meth:`in_force`, after re-reading ``shard``'s run-time limits if
        the last reading is older than the refresh interval."""
        state = self._shards.setdefault(shard, _ShardLimits())
        now = self._monotonic()
        if now - state.read_at >= self._refresh:
            state.read_at = now
            try:
                settings = await self.store.read_limits(shard)
            except Exception as exc:
                metrics.LIMIT_SETTINGS_STALE.labels(str(shard)).set(1)
                log.warning("run-time limits unreadable: %s", exc, extra={"shard": shard})
            else:
                metrics.LIMIT_SETTINGS_STALE.labels(str(shard)).set(0)
                state.overrides = {s.key: s.limit for s in settings}
                await self._count_waiting(shard, state)
                self._export(shard)
        return self.in_force(shard)

    async def _count_waiting(self, shard: int, state: _ShardLimits) -> None:
        keys = sorted(self.in_force(shard))
        if not keys and not state.waiting:
            return
        try:
            state.waiting = await self.store.count_waiting(shard, keys) if keys else {}
        except Exception as exc:  # a metric only: never worth a claim
            log.debug("waiting jobs not counted: %s", exc, extra={"shard": shard})
            return
        # The shards this worker read lately (those it polls): their sum.
        fresh = [s for s in self._shards.values() if state.read_at - s.read_at < 3 * self._refresh]
        for key in {k for s in self._shards.values() for k in s.waiting} | set(keys):
            metrics.TARGET_WAITING.labels(key).set(sum(s.waiting.get(key, 0) for s in fresh))

    def _export(self, shard: int) -> None:
        shards = self.store.shard_count
        for key, limit in self.in_force(shard).items():
            conc = effective_concurrency(limit, shards)
            if conc is not None:
                metrics.LIMIT_IN_FORCE.labels(key, "concurrency").set(conc)
            if limit.rate is not None:
                metrics.LIMIT_IN_FORCE.labels(key, "rate").set(limit.rate)

    async def slow(self, key: str, until: datetime) -> None:
        """Back-pressure: no firing of ``key`` starts before ``until``, on
        any shard (a target answered 429/503 with Retry-After). Limited
        keys only: an unlimited key's claims do not read its bucket."""
        if key not in self._slowed_until or self._slowed_until[key] < until:
            self._slowed_until[key] = until
        else:
            return  # a later pause is being written already
        for shard in range(self.store.shard_count):
            try:
                await self.store.slow_limit(shard, key, until)
            except Exception as exc:  # the next 429 tries again
                log.warning("back-pressure not written: %s", exc, extra={"shard": shard})
        metrics.LIMIT_SLOWED.labels(key).inc()

    async def claim(
        self,
        shard: int,
        limits: dict[str, TargetLimit],
        *,
        worker_id: str,
        room: int,
        lease_seconds: float,
        grace_seconds: float,
        horizon_seconds: float,
    ) -> list[AdmittedJob]:
        """Claim the due jobs of each limited key on ``shard`` that its share
        admits, at most ``room`` in all."""
        out: list[AdmittedJob] = []
        for key, limit in limits.items():
            most = room - len(out)
            if most <= 0:
                break
            admitted = await self.store.claim_limited(
                shard,
                LimitedClaimParams(
                    worker_id=worker_id,
                    key=key,
                    limit=limit,
                    shards=self.store.shard_count,
                    most=most,
                    lease_seconds=lease_seconds,
                    grace_seconds=grace_seconds,
                    horizon_seconds=horizon_seconds,
                ),
            )
            if admitted:
                metrics.LIMIT_ADMITTED.labels(key).inc(len(admitted))
                out.extend(admitted)
        return out
