"""The API's cron contract in memory: definitions and their actions."""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from collections.abc import Sequence

from cluster.errors import Conflict, NotFound
from cluster.model import (
    TERMINAL,
    BackfillParams,
    BackfillResult,
    BackfillSlot,
    CronRecord,
    CronRun,
    CronRunsParams,
    DeleteCronParams,
    GetCronParams,
    JobRecord,
    JobStatus,
    ListCronsParams,
    Occurrence,
    OwnerCountsParams,
    PauseCronParams,
    ResumeCronParams,
    RetryJobParams,
    TriggerCronParams,
)
from cluster.store.memory_cron.calendars import MemCalendars

__all__ = ["MemCronIntake"]


class MemCronIntake(MemCalendars):
    """:class:`~cluster.store.contracts.cron_intake.CronIntake` in memory."""

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
            c.settled_next.pop(cron.id, None)
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
                r
                for r in s.rows.values()
                if r.job.cron_id == cron.id and r.job.status is JobStatus.SCHEDULED
            ]
            for row in waiting:
                self.store._to_history(s, row, JobStatus.CANCELLED, "cron job deleted", now)
            return len(waiting)

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
                            shard,
                            dataclasses.replace(cron, concurrency="ALLOW"),
                            Occurrence(new_id, at, params.run_at, None),
                            far=False,
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

    async def crons_by_owner(self, shard: int, params: OwnerCountsParams) -> dict[str, int]:
        counts = Counter(x.owner for x in self._c(shard).by_id.values())
        return dict(counts.most_common(params.limit))
