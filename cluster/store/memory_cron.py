"""Cron definitions and occurrences in memory, beside :class:`MemStore`.

The :class:`~cluster.store.base.CronStore` contract with the semantics of
:mod:`cluster.store.postgres_cron` and its named queries: a cron's
occurrences become jobs of the :class:`MemStore` it wraps (so a worker over
that store runs them), one per (cron_id, scheduled_for) ever, written only
when the compare-and-set on ``next_fire_at`` wins. Time is the store's
injected clock. ``tests/contract/test_cron_store_contract.py`` runs the
same cases against both. Not for production: nothing is durable.

Known difference: a MemStore job carries no concurrency policy or starting
deadline (its records have no such fields), so a worker over the memory
store neither skips late occurrences nor revokes replaced ones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections import Counter
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from cluster.errors import Conflict, NotFound
from cluster.model import (
    TERMINAL,
    BackfillParams,
    BackfillResult,
    BackfillSlot,
    CreateJobParams,
    CronRecord,
    CronRun,
    CronRunsParams,
    DeleteCronParams,
    DueCountsParams,
    DueCron,
    DueCronsParams,
    GetCronParams,
    JobRecord,
    JobStatus,
    LastSuccessParams,
    ListCronsParams,
    MaterializeBatchParams,
    MaterializeResult,
    Occurrence,
    OwnerCountsParams,
    PauseCronParams,
    PendingInfo,
    PendingParams,
    PruneOccurrencesParams,
    ResumeCronParams,
    RetryJobParams,
    TriggerCronParams,
    WaitingCronsParams,
)
from cluster.store.base import CRON_SOON_SECONDS
from cluster.store.memory import MemStore

__all__ = ["MemCronStore"]


class _Slot(NamedTuple):
    """A row of the ledger (cron_occurrences): the slot's job, and when it was made."""

    job_id: uuid.UUID
    made_at: datetime


@dataclass
class _Crons:
    by_id: dict[uuid.UUID, CronRecord] = field(default_factory=dict)
    by_name: dict[tuple[str, str], uuid.UUID] = field(default_factory=dict)
    # cron_occurrences: outlives the job, so a slot is never made twice.
    ledger: dict[tuple[uuid.UUID, datetime], _Slot] = field(default_factory=dict)
    # cron_soon's listeners: a wake-up each, coalesced as NOTIFY's are.
    listeners: set[asyncio.Queue[None]] = field(default_factory=set)


def _due_cron(c: CronRecord) -> DueCron:
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
    )


def _second(t: datetime) -> datetime:
    return t.replace(microsecond=0)


# The outcomes a cron's last result shows: a cancelled occurrence is none.
_RESULTS = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.SKIPPED})


class MemCronStore:
    """:class:`~cluster.store.base.CronStore` over a :class:`MemStore`'s shards."""

    def __init__(self, store: MemStore) -> None:
        self.store = store
        self.shard_count = store.shard_count
        self._crons = [_Crons() for _ in range(store.shard_count)]

    def _c(self, shard: int) -> _Crons:
        self.store._shard(shard)  # the same range check and ValueError
        return self._crons[shard]

    def _now(self) -> datetime:
        return self.store.clock.now()

    def _note(self, c: _Crons, key: tuple[uuid.UUID, datetime], job_id: uuid.UUID) -> None:
        """A ledger row, made now (cron_occurrences' created_at)."""
        c.ledger[key] = _Slot(job_id, self._now())

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

    def _written(self, c: _Crons, cron: CronRecord) -> None:
        """Migration 15's triggers: a cron written due soon wakes the listeners."""
        soon = self._now() + timedelta(seconds=CRON_SOON_SECONDS)
        if cron.enabled and cron.paused_at is None and cron.next_fire_at is not None:
            if cron.next_fire_at < soon:
                for queue in c.listeners:
                    if queue.empty():
                        queue.put_nowait(None)

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

    # -- definitions -----------------------------------------------------------

    async def create(self, shard: int, cron: CronRecord) -> tuple[CronRecord, bool]:
        [result] = await self.create_many(shard, [cron])
        if isinstance(result, Conflict):
            raise result
        return result

    async def create_many(
        self, shard: int, crons: Sequence[CronRecord]
    ) -> list[tuple[CronRecord, bool] | Conflict]:
        c = self._c(shard)
        out: list[tuple[CronRecord, bool] | Conflict] = []
        async with self.store._lock:
            now = self._now()
            for cron in crons:
                existing_id = c.by_name.get((cron.owner, cron.name))
                if existing_id is not None:
                    existing = self._view(shard, c.by_id[existing_id])
                    if existing.fingerprint != cron.fingerprint:
                        out.append(
                            Conflict(
                                f"a cron job named {cron.name!r} exists with a different "
                                "definition; PATCH it, or choose another name",
                                cron_job_id=existing.id_text,
                                constraint="cron_jobs_name_uq",
                            )
                        )
                    else:
                        out.append((existing, False))
                    continue
                saved = dataclasses.replace(
                    cron,
                    last_fire_at=None,
                    last_success_at=None,
                    missed_count=0,
                    skipped_count=0,
                    created_at=now,
                    updated_at=now,
                )
                c.by_id[saved.id] = saved
                c.by_name[(saved.owner, saved.name)] = saved.id
                self._written(c, saved)
                out.append((saved, True))
        return out

    async def get(self, shard: int, params: GetCronParams) -> CronRecord | None:
        c = self._c(shard)
        cron = c.by_id.get(params.id)
        if cron is None or cron.owner != params.owner:
            return None
        return self._view(shard, cron)

    async def list_page(self, shard: int, params: ListCronsParams) -> list[CronRecord]:
        c = self._c(shard)
        mine = sorted(
            (x for x in c.by_id.values() if x.owner == params.owner and x.name > params.after),
            key=lambda x: x.name,
        )
        return [self._view(shard, x) for x in mine[: params.limit]]

    async def update(self, shard: int, cron: CronRecord) -> CronRecord:
        c = self._c(shard)
        async with self.store._lock:
            old = c.by_id.get(cron.id)
            if old is None or old.owner != cron.owner:
                raise NotFound("no such cron job", cron_job_id=cron.id_text)
            # update_cron: the definition and next_fire_at change; the
            # name, counters and stamps stay.
            saved = dataclasses.replace(
                cron,
                name=old.name,
                last_fire_at=old.last_fire_at,
                missed_count=old.missed_count,
                skipped_count=old.skipped_count,
                run_count=old.run_count,
                created_at=old.created_at,
                updated_at=self._now(),
                paused_at=old.paused_at,
                pause_reason=old.pause_reason,
            )
            c.by_id[cron.id] = saved
            self._written(c, saved)
            return self._view(shard, saved)

    async def delete(self, shard: int, params: DeleteCronParams) -> int:
        c = self._c(shard)
        s = self.store._shard(shard)
        async with self.store._lock:
            cron = c.by_id.get(params.id)
            if cron is None or cron.owner != params.owner:
                raise NotFound("no such cron job")
            del c.by_id[cron.id]
            del c.by_name[(cron.owner, cron.name)]
            now = self._now()
            # Not started, near or far; running ones finish.
            waiting = [
                r for r in s.rows.values() if r.job.cron_id == cron.id and r.job.status is JobStatus.SCHEDULED
            ]
            for row in waiting:
                self.store._to_history(s, row, JobStatus.CANCELLED, "cron job deleted", now)
            return len(waiting)

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

    async def trigger(self, shard: int, params: TriggerCronParams) -> bool:
        c = self._c(shard)
        cron, occ = params.cron, params.occurrence
        async with self.store._lock:
            if (cron.id, occ.scheduled_for) in c.ledger:
                return False
            current = c.by_id.get(cron.id, cron)
            if current.concurrency == "FORBID" and self._pending_near(shard, cron.id):
                raise Conflict(
                    "concurrency is FORBID and an occurrence of this cron job is pending or running",
                    cron_job_id=cron.id_text,
                    constraint="jobs_forbid_one_idx",
                )
            self._note(c, (cron.id, occ.scheduled_for), occ.job_id)
            self._insert(shard, current, occ, far=False)
            return True

    async def runs(self, shard: int, params: CronRunsParams) -> list[CronRun]:
        s = self.store._shard(shard)
        jobs: list[JobRecord] = [r.job for r in s.rows.values() if r.job.cron_id == params.cron_id]
        jobs += [h for h in s.history.values() if h.cron_id == params.cron_id]
        jobs.sort(key=lambda j: j.scheduled_for, reverse=True)
        out = []
        for j in jobs[: params.limit]:
            lateness = next(
                (
                    a.lateness_seconds
                    for a in sorted(s.attempts.get(j.id, []), key=lambda a: a.attempt)
                    if a.lateness_seconds is not None
                ),
                None,
            )
            out.append(
                CronRun(
                    job_id=j.id,
                    scheduled_for=j.scheduled_for,
                    run_at=j.run_at,
                    status=str(j.status),
                    attempt=j.attempt,
                    last_error=j.last_error,
                    finished_at=j.finished_at,
                    lateness_seconds=lateness,
                )
            )
        return out

    async def pause(self, shard: int, params: PauseCronParams) -> CronRecord:
        c = self._c(shard)
        s = self.store._shard(shard)
        async with self.store._lock:
            cron = c.by_id.get(params.id)
            if cron is None or cron.owner != params.owner:
                raise NotFound("no such cron job")
            now = params.now or self._now()
            # withdraw_cron_occurrences: slots not yet due go, as if never made.
            gone = [
                r.job
                for r in s.rows.values()
                if r.job.cron_id == cron.id
                and r.job.status is JobStatus.SCHEDULED
                and r.job.scheduled_for >= now
            ]
            for job in gone:
                del s.rows[job.id]
                c.ledger.pop((cron.id, job.scheduled_for), None)
            next_fire = cron.next_fire_at
            if gone:
                earliest = min(j.scheduled_for for j in gone)
                next_fire = earliest if next_fire is None else min(next_fire, earliest)
            c.by_id[cron.id] = cron = dataclasses.replace(
                cron,
                paused_at=cron.paused_at or now,
                pause_reason=params.reason,
                next_fire_at=next_fire,
                run_count=max(cron.run_count - len(gone), 0),
                updated_at=self._now(),
            )
            return self._view(shard, cron)

    async def resume(self, shard: int, params: ResumeCronParams) -> CronRecord:
        c = self._c(shard)
        async with self.store._lock:
            cron = c.by_id.get(params.id)
            if cron is None or cron.owner != params.owner:
                raise NotFound("no such cron job")
            c.by_id[cron.id] = cron = dataclasses.replace(
                cron, paused_at=None, pause_reason=None, updated_at=self._now()
            )
            self._written(c, cron)
            return self._view(shard, cron)

    async def backfill(self, shard: int, params: BackfillParams) -> BackfillResult:
        c = self._c(shard)
        s = self.store._shard(shard)
        out: list[BackfillSlot] = []
        rerun: list[uuid.UUID] = []
        async with self.store._lock:
            cron = c.by_id.get(params.cron_id)
            if cron is None or cron.owner != params.owner:
                raise NotFound("no such cron job")
            for at, new_id in zip(params.slots, params.job_ids, strict=True):
                made = c.ledger.get((cron.id, at))
                if made is None:
                    if not params.dry_run:
                        self._note(c, (cron.id, at), new_id)
                        self._insert(
                            shard, dataclasses.replace(cron, concurrency="ALLOW"),
                            Occurrence(new_id, at, params.run_at, None), far=False,
                        )
                    out.append(BackfillSlot(at, new_id, "created"))
                    continue
                job_id = made.job_id
                row = s.rows.get(job_id)
                job = row.job if row else s.history.get(job_id)
                status = job.status if job else None
                if params.rerun and status in TERMINAL and (job is None or job.attempt < 100):
                    out.append(BackfillSlot(at, job_id, "rerun", status))
                    rerun.append(job_id)
                else:
                    out.append(BackfillSlot(at, job_id, "exists", status))
        if not params.dry_run:
            for job_id in rerun:
                await self.store.retry_job(
                    shard,
                    RetryJobParams(
                        job_id, params.owner, run_at=params.run_at, statuses=TERMINAL, by="backfill"
                    ),
                )
        return BackfillResult(tuple(out))

    # -- the materializer ------------------------------------------------------

    async def database_now(self, shard: int) -> datetime:
        self._c(shard)
        return self._now()

    async def due(self, shard: int, params: DueCronsParams) -> list[DueCron]:
        c = self._c(shard)
        due = sorted(
            (x.next_fire_at, x.id)
            for x in c.by_id.values()
            if x.enabled and x.paused_at is None and x.next_fire_at is not None
            and x.next_fire_at <= params.until
        )
        if params.after is not None:
            due = [k for k in due if k > params.after]
        return [_due_cron(c.by_id[i]) for _, i in due[: params.limit]]

    async def due_counts(self, shard: int, params: DueCountsParams) -> list[tuple[datetime, int]]:
        c = self._c(shard)
        counts: dict[datetime, int] = {}
        floor = _second(params.now)
        for x in c.by_id.values():
            if x.enabled and x.paused_at is None and x.next_fire_at is not None and x.next_fire_at <= params.until:
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

    async def pending(self, shard: int, params: PendingParams) -> dict[uuid.UUID, PendingInfo]:
        self._c(shard)
        s = self.store._shard(shard)
        out = {}
        for cron_id in params.cron_ids:
            n = sum(1 for r in s.rows.values() if r.job.cron_id == cron_id)
            last = None
            if params.with_finished:
                last = max(
                    (h.finished_at for h in s.history.values() if h.cron_id == cron_id and h.finished_at),
                    default=None,
                )
            out[cron_id] = PendingInfo(n, last)
        return out

    async def materialize(self, shard: int, params: MaterializeBatchParams) -> MaterializeResult:
        c = self._c(shard)
        far_edge = params.now + timedelta(seconds=params.far_horizon_seconds)
        advanced: set[uuid.UUID] = set()
        refused: list[uuid.UUID] = []
        created = 0
        async with self.store._lock:
            for item in params.items:
                cron = c.by_id.get(item.cron_id)
                if cron is None or not cron.enabled or cron.paused_at is not None or cron.next_fire_at != item.expected_next:
                    continue  # the compare-and-set lost: nothing of this cron is written
                last_fire = cron.last_fire_at
                if item.last_fire is not None:
                    last_fire = item.last_fire if last_fire is None else max(last_fire, item.last_fire)
                c.by_id[cron.id] = cron = dataclasses.replace(
                    cron,
                    next_fire_at=item.next_fire_at,
                    last_fire_at=last_fire,
                    missed_count=cron.missed_count + item.missed,
                    skipped_count=cron.skipped_count + item.skipped,
                    run_count=cron.run_count + item.runs,
                )
                advanced.add(cron.id)
                may_go_far = cron.concurrency != "FORBID" and cron.schedule_kind != "FIXED_DELAY"
                for occ in item.occurrences:
                    if (cron.id, occ.scheduled_for) in c.ledger:
                        continue
                    self._note(c, (cron.id, occ.scheduled_for), occ.job_id)
                    far = may_go_far and occ.run_at > far_edge
                    if not far and cron.concurrency == "FORBID" and self._pending_near(shard, cron.id):
                        refused.append(cron.id)  # the FORBID index refuses the job
                        continue
                    self._insert(shard, cron, occ, far)
                    created += 1
        return MaterializeResult(frozenset(advanced), created, tuple(refused))

    async def crons_by_owner(self, shard: int, params: OwnerCountsParams) -> dict[str, int]:
        counts = Counter(x.owner for x in self._c(shard).by_id.values())
        return dict(counts.most_common(params.limit))

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
