"""Heartbeats: the leases of long jobs are extended before they run out.

A lease is the worker's claim on a RUNNING job (DESIGN.md, invariant 3).
Every ``heartbeat_every`` seconds, per shard, the leases that would run out
within the next lease period are extended in one statement, each fenced by
its attempt. A lease the shard no longer grants was lost (it expired and
someone else has the job): the job is dropped, its task cancelled, and
nothing is written for it. Preloaded jobs need no beat while they wait: the
claim runs their lease from their ``run_at``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta

from cluster import metrics
from cluster.clock import Clock
from cluster.errors import SlotMoving, VakitError
from cluster.model import HeartbeatParams
from cluster.store.contracts.claims import JobClaims
from cluster.worker.inflight import InFlight, log_fields, refused_for_move

__all__ = ["Heartbeat"]

log = logging.getLogger(__name__)


class Heartbeat:
    """Extends the leases of the jobs in ``inflight`` (per shard); a lost
    job is removed from it and ``on_lost`` runs (there is room again)."""

    def __init__(
        self,
        store: JobClaims,
        clock: Clock,
        inflight: Mapping[int, dict[uuid.UUID, InFlight]],
        *,
        lease_seconds: float,
        grace_seconds: float,
        every: float,
        on_lost: Callable[[], None],
    ) -> None:
        self.store = store
        self.clock = clock
        self._inflight = inflight
        self._lease = lease_seconds
        self._grace = grace_seconds
        self.every = every
        self._on_lost = on_lost

    async def run_once(self, shard: int) -> int:
        """Extend the leases that run out within the next lease period; jobs
        whose lease is gone are dropped. Returns how many were lost."""
        inflight = self._inflight[shard]
        now = self.clock.now()
        due = [
            e
            for e in inflight.values()
            if not e.lost and (e.lease_until - now).total_seconds() < self._lease
        ]
        if not due:
            return 0
        refused: frozenset[uuid.UUID] = frozenset()
        try:
            kept = await self.store.heartbeat(
                shard,
                HeartbeatParams(
                    leases=tuple(e.job.lease for e in due),
                    lease_seconds=self._lease,
                    grace_seconds=self._grace,
                ),
            )
        except SlotMoving as exc:
            # Leases of a slot moving off this shard were not extended here:
            # the jobs run on, and are not dropped.
            kept, refused = refused_for_move(exc, "heartbeat", shard)
        lost = 0
        extended = now + timedelta(seconds=self._lease + self._grace)
        for entry in due:
            if entry.job.id in kept:
                entry.lease_until = max(entry.lease_until, extended)
            elif entry.job.id in refused:
                continue
            elif inflight.get(entry.job.id) is entry:
                lost += 1
                self._drop(entry, inflight)
        return lost

    def _drop(self, entry: InFlight, inflight: dict[uuid.UUID, InFlight]) -> None:
        entry.lost = True
        metrics.FENCED.labels(str(entry.shard), "heartbeat").inc()
        log.warning("lease lost: dropping the job, writing nothing", extra=log_fields(entry))
        inflight.pop(entry.job.id, None)
        if entry.task is not None:
            entry.task.cancel()
        self._on_lost()

    async def beat_shard(self, shard: int) -> None:
        """One bounded :meth:`run_once`: a shard that hangs must not hold back
        the heartbeats (and so the leases) of the others."""
        try:
            async with asyncio.timeout(self.every * 2):
                await self.run_once(shard)
        except VakitError as exc:
            log.warning("heartbeat failed: %s", exc, extra={"shard": shard})
        except TimeoutError:
            log.warning("heartbeat timed out", extra={"shard": shard})
        except Exception:
            log.exception("heartbeat error", extra={"shard": shard})
