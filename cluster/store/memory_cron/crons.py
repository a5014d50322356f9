"""The memory cron store's state beside its :class:`MemStore`: definitions,
the occurrence ledger and the wake-up listeners, and the reading both cron
roles take (:class:`~cluster.store.contracts.readings.CronPending`)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from cluster.model import (
    CalendarRecord,
    CreateJobParams,
    CronRecord,
    JobStatus,
    Occurrence,
    PendingInfo,
    PendingParams,
)
from cluster.store.contracts.cron_upkeep import CRON_SOON_SECONDS
from cluster.store.memory import MemStore

__all__ = ["MemCronShards", "MemCrons", "MemSlot"]


class MemSlot(NamedTuple):
    """A row of the ledger (cron_occurrences): the slot's job, and when it was made."""

    job_id: uuid.UUID
    made_at: datetime


@dataclass
class MemCrons:
    by_id: dict[uuid.UUID, CronRecord] = field(default_factory=dict)
    by_name: dict[tuple[str, str], uuid.UUID] = field(default_factory=dict)
    # cron_occurrences: outlives the job, so a slot is never made twice.
    ledger: dict[tuple[uuid.UUID, datetime], MemSlot] = field(default_factory=dict)
    # cron_soon's listeners: a wake-up each, coalesced as NOTIFY's are.
    listeners: set[asyncio.Queue[None]] = field(default_factory=set)
    # This shard's copy of each calendar, by (owner, name).
    calendars: dict[tuple[str, str], CalendarRecord] = field(default_factory=dict)
    # cron_jobs.calendar_held and calendar_version: (calendar, version) by cron.
    held_versions: dict[uuid.UUID, tuple[str, int]] = field(default_factory=dict)
    # Migration 25's settled_next, by cron (absent: NULL).
    settled_next: dict[uuid.UUID, datetime | None] = field(default_factory=dict)


# The outcomes a cron's last result shows: a cancelled occurrence is none.
_RESULTS = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.SKIPPED})


class MemCronShards:
    """Crons over a :class:`MemStore`'s shards: what both cron roles share."""

    def __init__(self, store: MemStore) -> None:
        self.store = store
        self.shard_count = store.shard_count
        self._crons = [MemCrons() for _ in range(store.shard_count)]

    def _c(self, shard: int) -> MemCrons:
        self.store._shard(shard)  # the same range check and ValueError
        return self._crons[shard]

    def _now(self) -> datetime:
        return self.store.clock.now()

    def _note(self, c: MemCrons, key: tuple[uuid.UUID, datetime], job_id: uuid.UUID) -> None:
        """A ledger row, made now (cron_occurrences' created_at)."""
        c.ledger[key] = MemSlot(job_id, self._now())

    def _view(self, shard: int, cron: CronRecord) -> CronRecord:
        """The record as the database shows it: last_success_at and the last
        result are folded from the history there (and what the fold has not
        reached added by the reads); here they are read from the history."""
        s = self.store._shard(shard)
        finished = [
            (h.finished_at, h.scheduled_for, h.status)
            for h in s.history.values()
            if h.cron_id == cron.id and h.status in _RESULTS and h.finished_at
        ]
        succeeded = [at for at, _, status in finished if status is JobStatus.SUCCEEDED]
        last = max(finished, default=None)
        return dataclasses.replace(
            cron,
            last_success_at=max(succeeded, default=None),
            last_result=last[2].value if last else None,
            last_result_at=last[0] if last else None,
        )

    def _written(self, c: MemCrons, cron: CronRecord) -> None:
        """Migration 15's triggers: a cron written due soon wakes the listeners."""
        soon = self._now() + timedelta(seconds=CRON_SOON_SECONDS)
        if cron.enabled and cron.paused_at is None and cron.next_fire_at is not None:
            if cron.next_fire_at < soon:
                for queue in c.listeners:
                    if queue.empty():
                        queue.put_nowait(None)

    def _pending_near(self, shard: int, cron_id: uuid.UUID) -> bool:
        s = self.store._shard(shard)
        return any(r.job.cron_id == cron_id and not r.far for r in s.rows.values())

    def _insert(self, shard: int, cron: CronRecord, occ: Occurrence, far: bool) -> None:
        s = self.store._shard(shard)
        params = CreateJobParams(
            id=occ.job_id,
            owner=cron.owner,
            type=cron.type,
            run_at=occ.run_at,
            scheduled_for=occ.scheduled_for,
            target=cron.target,
            payload=cron.payload,
            max_attempts=cron.max_attempts,
            timeout_seconds=cron.timeout_seconds,
            cron_id=cron.id,
            far=far,
        )
        self.store._create(s, shard, params)

    async def pending(self, shard: int, params: PendingParams) -> dict[uuid.UUID, PendingInfo]:
        self._c(shard)
        s = self.store._shard(shard)
        out = {}
        for cron_id in params.cron_ids:
            n = sum(1 for r in s.rows.values() if r.job.cron_id == cron_id)
            last = None
            if params.with_finished:
                last = max(
                    (
                        h.finished_at
                        for h in s.history.values()
                        if h.cron_id == cron_id and h.finished_at
                    ),
                    default=None,
                )
            out[cron_id] = PendingInfo(n, last)
        return out
