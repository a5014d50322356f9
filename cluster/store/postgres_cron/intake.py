"""The API's cron contract on PostgreSQL: definitions and their actions."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

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
    JobStatus,
    ListCronsParams,
    OwnerCountsParams,
    PauseCronParams,
    ResumeCronParams,
    TriggerCronParams,
)
from cluster.store.pgshards import wrap_exceptions
from cluster.store.postgres_cron.calendars import PgCalendars
from cluster.store.postgres_cron.rows import cron_columns, cron_row
from cluster.store.sql import QUERIES

__all__ = ["PgCronIntake"]


def _name_conflict(existing: CronRecord) -> Conflict:
    return Conflict(
        f"a cron job named {existing.name!r} exists with a different definition; "
        "PATCH it, or choose another name",
        cron_job_id=existing.id_text,
        constraint="cron_jobs_name_uq",
    )


def _same_or_conflict(
    existing: CronRecord, wanted: CronRecord
) -> tuple[CronRecord, bool] | Conflict:
    if existing.fingerprint != wanted.fingerprint:
        return _name_conflict(existing)
    return existing, False


def _forbid_conflict(cron: CronRecord) -> Conflict:
    return Conflict(
        "concurrency is FORBID and an occurrence of this cron job is pending or running",
        cron_job_id=cron.id_text,
        constraint="jobs_forbid_one_idx",
    )


def _backfill_slot(
    at: datetime,
    new_id: uuid.UUID,
    existing: dict[datetime, tuple[uuid.UUID, str | None]],
    created: set[uuid.UUID],
    rerun: set[uuid.UUID],
    params: BackfillParams,
) -> BackfillSlot:
    """What became of one slot: a dry run says what would have."""
    found = existing.get(at)
    if found is None:
        if params.dry_run or new_id in created:
            return BackfillSlot(at, new_id, "created")
        # Written by someone else between the read and the insert: it exists.
        return BackfillSlot(at, new_id, "exists")
    job_id, status = found
    state = JobStatus(status) if status is not None else None
    if params.rerun and state in TERMINAL and (params.dry_run or job_id in rerun):
        return BackfillSlot(at, job_id, "rerun", state)
    return BackfillSlot(at, job_id, "exists", state)


class PgCronIntake(PgCalendars):
    """:class:`~cluster.store.contracts.cron_intake.CronIntake` on PostgreSQL."""

    @wrap_exceptions
    async def create(self, shard: int, cron: CronRecord) -> tuple[CronRecord, bool]:
        [result] = await self.create_many(shard, [cron])
        if isinstance(result, Conflict):
            raise result
        return result

    @wrap_exceptions
    async def create_many(
        self, shard: int, crons: Sequence[CronRecord]
    ) -> list[tuple[CronRecord, bool] | Conflict]:
        # A name twice in one call: the first is written, the repeats are
        # answered from it, as a later call would be.
        first: dict[tuple[str, str], CronRecord] = {}
        for c in crons:
            first.setdefault((c.owner, c.name), c)
        unique = list(first.values())
        found: dict[tuple[str, str], tuple[CronRecord, bool]] = {}
        if unique:
            for row in await self._rows(shard, "insert_crons", cron_columns(unique)):
                rec = CronRecord.from_row(row)
                found[(rec.owner, rec.name)] = (rec, bool(row["created"]))
        missing = [c for c in unique if (c.owner, c.name) not in found]
        if missing:
            # Inserted by another transaction after our statement's snapshot.
            args = {"owners": [c.owner for c in missing], "names": [c.name for c in missing]}
            for row in await self._rows(shard, "get_crons_by_names", args):
                rec = CronRecord.from_row(row)
                found[(rec.owner, rec.name)] = (rec, False)
        out: list[tuple[CronRecord, bool] | Conflict] = []
        written: set[tuple[str, str]] = set()
        for c in crons:
            key = (c.owner, c.name)
            hit = found.get(key)
            if hit is None:  # deleted between the two statements; let the client retry
                out.append(Conflict("cron job was being deleted; retry", name=c.name))
                continue
            rec, created = hit
            if created and key not in written and rec.id == c.id:
                written.add(key)
                out.append((rec, True))
            else:
                out.append(_same_or_conflict(rec, c))
        return out

    @wrap_exceptions
    async def get(self, shard: int, params: GetCronParams) -> CronRecord | None:
        rows = await self._rows(shard, "get_cron", {"id": params.id, "owner": params.owner})
        return CronRecord.from_row(rows[0]) if rows else None

    @wrap_exceptions
    async def list_page(self, shard: int, params: ListCronsParams) -> list[CronRecord]:
        rows = await self._rows(
            shard,
            "list_crons",
            {"owner": params.owner, "after": params.after, "limit": params.limit},
        )
        return [CronRecord.from_row(r) for r in rows]

    @wrap_exceptions
    async def update(self, shard: int, cron: CronRecord) -> CronRecord:
        rows = await self._rows(shard, "update_cron", cron_row(cron))
        if not rows:
            raise NotFound("no such cron job", cron_job_id=cron.id_text)
        return CronRecord.from_row(rows[0])

    @wrap_exceptions
    async def delete(self, shard: int, params: DeleteCronParams) -> int:
        args = {"id": params.id, "owner": params.owner}
        async with self.store.connection(shard) as conn, conn.transaction():
            cur = await conn.execute(QUERIES["delete_cron"], args)
            if await cur.fetchone() is None:
                raise NotFound("no such cron job")
            cur = await conn.execute(QUERIES["cancel_cron_occurrences"], args)
            return len(await cur.fetchall())

    @wrap_exceptions
    async def trigger(self, shard: int, params: TriggerCronParams) -> bool:
        occ = params.occurrence
        args = {
            "cron_id": params.cron.id,
            "job_ids": [occ.job_id],
            "scheduled": [occ.scheduled_for],
            "run_at": [occ.run_at],
            "deadline": [occ.deadline_at],
        }
        try:
            rows = await self._rows(shard, "insert_occurrences", args)
        except Conflict as exc:
            # The FORBID index: one occurrence pending or running at a time.
            raise _forbid_conflict(params.cron) from exc
        return bool(rows)

    @wrap_exceptions
    async def runs(self, shard: int, params: CronRunsParams) -> list[CronRun]:
        rows = await self._rows(shard, "cron_runs", {"id": params.cron_id, "limit": params.limit})
        return [CronRun(job_id=r.pop("id"), **r) for r in rows]

    @wrap_exceptions
    async def pause(self, shard: int, params: PauseCronParams) -> CronRecord:
        args = {"id": params.id, "owner": params.owner, "reason": params.reason, "now": params.now}
        async with self.store.connection(shard) as conn, conn.transaction():
            cur = await conn.execute(QUERIES["pause_cron"], args)
            if await cur.fetchone() is None:
                raise NotFound("no such cron job")
            await conn.execute(QUERIES["withdraw_cron_occurrences"], args)
        return await self._reread(shard, params.id, params.owner)

    @wrap_exceptions
    async def resume(self, shard: int, params: ResumeCronParams) -> CronRecord:
        rows = await self._rows(shard, "resume_cron", {"id": params.id, "owner": params.owner})
        if not rows:
            raise NotFound("no such cron job")
        return await self._reread(shard, params.id, params.owner)

    async def _reread(self, shard: int, cron_id: uuid.UUID, owner: str) -> CronRecord:
        rows = await self._rows(shard, "get_cron", {"id": cron_id, "owner": owner})
        if not rows:
            raise NotFound("no such cron job")
        return CronRecord.from_row(rows[0])

    @wrap_exceptions
    async def backfill(self, shard: int, params: BackfillParams) -> BackfillResult:
        await self._reread(shard, params.cron_id, params.owner)  # NotFound before anything
        slots = list(params.slots)
        async with self.store.connection(shard) as conn, conn.transaction():
            cur = await conn.execute(
                QUERIES["backfill_existing"], {"cron_id": params.cron_id, "slots": slots}
            )
            existing = {at: (job_id, status) for at, job_id, status in await cur.fetchall()}
            fresh = [
                (at, jid)
                for at, jid in zip(slots, params.job_ids, strict=True)
                if at not in existing
            ]
            created: set[uuid.UUID] = set()
            if fresh and not params.dry_run:
                cur = await conn.execute(
                    QUERIES["insert_backfill"],
                    {
                        "cron_id": params.cron_id,
                        "owner": params.owner,
                        "job_ids": [jid for _, jid in fresh],
                        "scheduled": [at for at, _ in fresh],
                        "run_at": params.run_at,
                    },
                )
                created = {row[0] for row in await cur.fetchall()}
            rerun: set[uuid.UUID] = set()
            if params.rerun and not params.dry_run:
                for job_id, status in existing.values():
                    if status is not None and JobStatus(status) in TERMINAL:
                        cur = await conn.execute(
                            QUERIES["retry_job"],
                            {
                                "id": job_id,
                                "owner": params.owner,
                                "statuses": sorted(x.value for x in TERMINAL),
                                "max_attempts": None,
                                "run_at": params.run_at,
                                "by": "backfill",
                                "now": None,
                            },
                        )
                        if await cur.fetchone() is not None:
                            rerun.add(job_id)
        return BackfillResult(
            tuple(
                _backfill_slot(at, jid, existing, created, rerun, params)
                for at, jid in zip(slots, params.job_ids, strict=True)
            )
        )

    @wrap_exceptions
    async def crons_by_owner(self, shard: int, params: OwnerCountsParams) -> dict[str, int]:
        rows = await self.store.fetch(shard, "crons_by_owner", {"limit": params.limit})
        return {r["owner"]: r["n"] for r in rows}
