"""The materializer's and janitor's cron contract in memory."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncGenerator
from datetime import datetime, timedelta

from cluster.model import (
    CronRecord,
    DueCountsParams,
    DueCron,
    DueCronsParams,
    LastSuccessParams,
    MaterializeBatchParams,
    MaterializeResult,
    PruneOccurrencesParams,
    WaitingCronsParams,
)
from cluster.store.memory_cron.calendars import MemCalendars
from cluster.store.memory_cron.crons import MemCrons

__all__ = ["MemCronUpkeep"]


def _settled(c: MemCrons, x: CronRecord) -> bool:
    """Migration 25: whether the materializer planned ``x`` up to a settled slot."""
    return (
        x.calendar_policy != "PREVIOUS_BUSINESS_DAY" or c.settled_next.get(x.id) == x.next_fire_at
    )


def _due_cron(c: CronRecord, settled: bool = True) -> DueCron:
    return DueCron(
        c.id,
        c.schedule,
        c.schedule_kind,
        c.time_zone,
        c.anchor,
        c.misfire_policy,
        c.concurrency,
        c.jitter_seconds,
        c.starting_deadline_seconds,
        c.next_fire_at,
        c.month_end_policy,
        c.dst_policy,
        c.end_at,
        c.max_runs,
        c.run_count,
        c.owner,
        c.calendar,
        c.calendar_policy,
        settled,
    )


def _second(t: datetime) -> datetime:
    return t.replace(microsecond=0)


class MemCronUpkeep(MemCalendars):
    """:class:`~cluster.store.contracts.cron_upkeep.CronUpkeep` in memory."""

    async def cron_soon(self, shard: int) -> AsyncGenerator[None, None]:
        c = self._c(shard)
        queue: asyncio.Queue[None] = asyncio.Queue(maxsize=1)
        c.listeners.add(queue)
        try:
            yield
            while True:
                await queue.get()
                yield
        finally:
            c.listeners.discard(queue)

    async def database_now(self, shard: int) -> datetime:
        self._c(shard)
        return self._now()

    async def due(self, shard: int, params: DueCronsParams) -> list[DueCron]:
        c = self._c(shard)
        unsettled_until = params.unsettled_until or params.until
        due = sorted(
            (x.next_fire_at, x.id)
            for x in c.by_id.values()
            if x.enabled
            and x.paused_at is None
            and x.next_fire_at is not None
            and (
                x.next_fire_at <= params.until
                or (x.next_fire_at <= unsettled_until and not _settled(c, x))
            )
        )
        if params.after is not None:
            due = [k for k in due if k > params.after]
        return [_due_cron(c.by_id[i], _settled(c, c.by_id[i])) for _, i in due[: params.limit]]

    async def due_counts(self, shard: int, params: DueCountsParams) -> list[tuple[datetime, int]]:
        c = self._c(shard)
        counts: dict[datetime, int] = {}
        floor = _second(params.now)
        for x in c.by_id.values():
            if (
                x.enabled
                and x.paused_at is None
                and x.next_fire_at is not None
                and x.next_fire_at <= params.until
            ):
                at = max(_second(x.next_fire_at), floor)
                counts[at] = counts.get(at, 0) + 1
        return sorted(counts.items())

    async def waiting_fixed_delay(self, shard: int, params: WaitingCronsParams) -> list[DueCron]:
        c = self._c(shard)
        waiting = sorted(
            x.id
            for x in c.by_id.values()
            if x.enabled
            and x.paused_at is None
            and x.next_fire_at is None
            and x.schedule_kind == "FIXED_DELAY"
            and (x.max_runs is None or x.run_count < x.max_runs)
            and (x.end_at is None or x.end_at > self._now())
            and (params.after is None or x.id > params.after)
        )
        return [_due_cron(c.by_id[i]) for i in waiting[: params.limit]]

    async def materialize(self, shard: int, params: MaterializeBatchParams) -> MaterializeResult:
        c = self._c(shard)
        far_edge = params.now + timedelta(seconds=params.far_horizon_seconds)
        advanced: set[uuid.UUID] = set()
        refused: list[uuid.UUID] = []
        created = 0
        async with self.store._lock:
            for item in params.items:
                cron = c.by_id.get(item.cron_id)
                if (
                    cron is None
                    or not cron.enabled
                    or cron.paused_at is not None
                    or cron.next_fire_at != item.expected_next
                    or self._planned_by_older(c, cron, item.calendar_version)
                ):
                    continue  # the compare-and-set lost: nothing of this cron is written
                last_fire = cron.last_fire_at
                if item.last_fire is not None:
                    last_fire = (
                        item.last_fire if last_fire is None else max(last_fire, item.last_fire)
                    )
                c.by_id[cron.id] = cron = dataclasses.replace(
                    cron,
                    next_fire_at=item.next_fire_at,
                    last_fire_at=last_fire,
                    missed_count=cron.missed_count + item.missed,
                    skipped_count=cron.skipped_count + item.skipped,
                    run_count=cron.run_count + item.runs,
                )
                if cron.calendar_policy == "PREVIOUS_BUSINESS_DAY":
                    c.settled_next[cron.id] = item.next_fire_at if item.settled else None
                advanced.add(cron.id)
                may_go_far = cron.concurrency != "FORBID" and cron.schedule_kind != "FIXED_DELAY"
                for occ in item.occurrences:
                    if (cron.id, occ.scheduled_for) in c.ledger:
                        continue
                    self._note(c, (cron.id, occ.scheduled_for), occ.job_id)
                    far = may_go_far and occ.run_at > far_edge
                    if (
                        not far
                        and cron.concurrency == "FORBID"
                        and self._pending_near(shard, cron.id)
                    ):
                        refused.append(cron.id)  # the FORBID index refuses the job
                        continue
                    self._insert(shard, cron, occ, far)
                    created += 1
        return MaterializeResult(frozenset(advanced), created, tuple(refused))

    @staticmethod
    def _planned_by_older(c: MemCrons, cron: CronRecord, version: int) -> bool:
        """Migration 23's test: a change re-planned the cron by a later
        version of its calendar than the one this write was planned by."""
        held = c.held_versions.get(cron.id)
        return held is not None and held[0] == cron.calendar and held[1] > version

    async def prune_occurrences(self, shard: int, params: PruneOccurrencesParams) -> int:
        c = self._c(shard)
        s = self.store._shard(shard)
        gone = [
            key
            for key, made in c.ledger.items()
            if key[1] < params.before and made.made_at < params.before and made.job_id not in s.rows
        ][: params.limit]
        for key in gone:
            del c.ledger[key]
        return len(gone)

    async def last_successes(
        self, shard: int, params: LastSuccessParams
    ) -> list[tuple[uuid.UUID, datetime]]:
        c = self._c(shard)
        out: list[tuple[uuid.UUID, datetime]] = []
        for x in c.by_id.values():
            if not x.enabled or x.paused_at is not None:
                continue
            when = self._view(shard, x).last_success_at or x.created_at
            if when is not None:
                out.append((x.id, when))
        out.sort(key=lambda pair: pair[1])
        return out[: params.limit]
