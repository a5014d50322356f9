"""Cron definitions and occurrences in PostgreSQL, on the shards' pools.

The :class:`~cluster.store.base.CronStore` contract over PostgreSQL. Kept
apart from :mod:`cluster.store.postgres` (one concept per module) but
sharing its pools and its error translation: no psycopg exception leaves
this module.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncGenerator, Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

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
    DueCountsParams,
    DueCron,
    DueCronsParams,
    GetCronParams,
    JobStatus,
    LastSuccessParams,
    ListCronsParams,
    MaterializeBatchParams,
    MaterializeResult,
    OwnerCountsParams,
    PauseCronParams,
    PendingInfo,
    PendingParams,
    PruneOccurrencesParams,
    ResumeCronParams,
    TriggerCronParams,
    WaitingCronsParams,
)
from cluster.model.jsontext import json_bytes
from cluster.store.pgshards import wrap_exceptions
from cluster.store.postgres import PgStore
from cluster.store.sql import QUERIES

__all__ = ["PgCronStore"]

# The keyset start: before every (next_fire_at, id).
_FIRST_AT = datetime(1, 1, 1, tzinfo=UTC)
_FIRST_ID = uuid.UUID(int=0)


def _cron_row(c: CronRecord) -> dict[str, Any]:
    return {
        "id": c.id,
        "owner": c.owner,
        "name": c.name,
        "schedule": c.schedule,
        "schedule_kind": c.schedule_kind,
        "time_zone": c.time_zone,
        "type": c.type,
        "target_kind": c.target_kind,
        "target": Jsonb(c.target, json_bytes),
        "payload": Jsonb(c.payload, json_bytes),
        "misfire_policy": c.misfire_policy,
        "concurrency": c.concurrency,
        "jitter_seconds": c.jitter_seconds,
        "max_attempts": c.max_attempts,
        "timeout_seconds": c.timeout_seconds,
        "starting_deadline_seconds": c.starting_deadline_seconds,
        "enabled": c.enabled,
        "anchor": c.anchor,
        "next_fire_at": c.next_fire_at,
        "fingerprint": c.fingerprint,
        "month_end_policy": c.month_end_policy,
        "dst_policy": c.dst_policy,
        "start_at": c.start_at,
        "end_at": c.end_at,
        "max_runs": c.max_runs,
    }


def _cron_columns(crons: Sequence[CronRecord]) -> dict[str, Any]:
    """insert_crons' arrays, one per column; JSON as text, parsed by the cast."""
    return {
        "ids": [c.id for c in crons],
        "owners": [c.owner for c in crons],
        "names": [c.name for c in crons],
        "schedules": [c.schedule for c in crons],
        "schedule_kinds": [c.schedule_kind for c in crons],
        "time_zones": [c.time_zone for c in crons],
        "types": [c.type for c in crons],
        "target_kinds": [c.target_kind for c in crons],
        "targets": [json.dumps(c.target, separators=(",", ":")) for c in crons],
        "payloads": [json.dumps(c.payload, separators=(",", ":")) for c in crons],
        "misfire_policies": [c.misfire_policy for c in crons],
        "concurrencies": [c.concurrency for c in crons],
        "jitters": [c.jitter_seconds for c in crons],
        "max_attempts": [c.max_attempts for c in crons],
        "timeouts": [c.timeout_seconds for c in crons],
        "deadlines": [c.starting_deadline_seconds for c in crons],
        "enabled": [c.enabled for c in crons],
        "anchors": [c.anchor for c in crons],
        "next_fire": [c.next_fire_at for c in crons],
        "fingerprints": [c.fingerprint for c in crons],
        "month_ends": [c.month_end_policy for c in crons],
        "dsts": [c.dst_policy for c in crons],
        "start_ats": [c.start_at for c in crons],
        "end_ats": [c.end_at for c in crons],
        "max_runs": [c.max_runs for c in crons],
    }


def _name_conflict(existing: CronRecord) -> Conflict:
    return Conflict(
        f"a cron job named {existing.name!r} exists with a different definition; "
        "PATCH it, or choose another name",
        cron_job_id=existing.id_text,
        constraint="cron_jobs_name_uq",
    )


def _same_or_conflict(existing: CronRecord, wanted: CronRecord) -> tuple[CronRecord, bool] | Conflict:
    if existing.fingerprint != wanted.fingerprint:
        return _name_conflict(existing)
    return existing, False


def _forbid_conflict(cron: CronRecord) -> Conflict:
    return Conflict(
        "concurrency is FORBID and an occurrence of this cron job is pending or running",
        cron_job_id=cron.id_text,
        constraint="jobs_forbid_one_idx",
    )


class PgCronStore:
    """:class:`~cluster.store.base.CronStore` on the pools of a :class:`PgStore`."""

    def __init__(self, store: PgStore) -> None:
        self.store = store
        self.shard_count = store.shard_count

    async def _rows(self, shard: int, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return await self.store.fetch(shard, name, params)

    # -- definitions -----------------------------------------------------------

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
            for row in await self._rows(shard, "insert_crons", _cron_columns(unique)):
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
            shard, "list_crons", {"owner": params.owner, "after": params.after, "limit": params.limit}
        )
        return [CronRecord.from_row(r) for r in rows]

    @wrap_exceptions
    async def update(self, shard: int, cron: CronRecord) -> CronRecord:
        rows = await self._rows(shard, "update_cron", _cron_row(cron))
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
            fresh = [(at, jid) for at, jid in zip(slots, params.job_ids, strict=True) if at not in existing]
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
            tuple(_backfill_slot(at, jid, existing, created, rerun, params) for at, jid in zip(slots, params.job_ids, strict=True))
        )

    # -- the materializer ------------------------------------------------------

    @wrap_exceptions
    async def database_now(self, shard: int) -> datetime:
        [row] = await self._rows(shard, "cron_clock", {})
        now: datetime = row["now"]
        return now

    def cron_soon(self, shard: int) -> AsyncGenerator[None, None]:
        # NOTIFY vakit_cron_soon comes from cron_jobs' triggers (migration 15).
        return self.store.listen(shard, "vakit_cron_soon")

    @wrap_exceptions
    async def due(self, shard: int, params: DueCronsParams) -> list[DueCron]:
        after_at, after_id = params.after or (_FIRST_AT, _FIRST_ID)
        args = {"until": params.until, "after_at": after_at, "after_id": after_id, "limit": params.limit}
        rows = await self.store.fetch_as(shard, "due_crons", args, tuple_row)
        return [DueCron(*r) for r in rows]

    @wrap_exceptions
    async def due_counts(self, shard: int, params: DueCountsParams) -> list[tuple[datetime, int]]:
        args = {"until": params.until, "now": params.now}
        rows = await self.store.fetch_as(shard, "cron_due_counts", args, tuple_row)
        return [(at, int(n)) for at, n in rows]

    @wrap_exceptions
    async def waiting_fixed_delay(self, shard: int, params: WaitingCronsParams) -> list[DueCron]:
        args = {"after_id": params.after or _FIRST_ID, "limit": params.limit}
        rows = await self.store.fetch_as(shard, "waiting_fixed_delay_crons", args, tuple_row)
        return [DueCron(*r) for r in rows]

    @wrap_exceptions
    async def pending(self, shard: int, params: PendingParams) -> dict[uuid.UUID, PendingInfo]:
        if not params.cron_ids:
            return {}
        args = {"ids": list(params.cron_ids), "finished": [params.with_finished] * len(params.cron_ids)}
        rows = await self.store.fetch_as(shard, "crons_pending", args, tuple_row)
        return {cron_id: PendingInfo(int(n), last) for cron_id, n, last in rows}

    @wrap_exceptions
    async def materialize(self, shard: int, params: MaterializeBatchParams) -> MaterializeResult:
        items = params.items
        if not items:
            return MaterializeResult(frozenset(), 0)
        occ = [(p.cron_id, o) for p in items for o in p.occurrences]
        args = {
            "ids": [p.cron_id for p in items],
            "expected": [p.expected_next for p in items],
            "next": [p.next_fire_at for p in items],
            "last_fire": [p.last_fire for p in items],
            "missed": [p.missed for p in items],
            "skipped": [p.skipped for p in items],
            "runs": [p.runs for p in items],
            "occ_cron": [c for c, _ in occ],
            "occ_job": [o.job_id for _, o in occ],
            "occ_scheduled": [o.scheduled_for for _, o in occ],
            "occ_run_at": [o.run_at for _, o in occ],
            "occ_deadline": [o.deadline_at for _, o in occ],
            "now": params.now,
            "far_horizon": params.far_horizon_seconds,
        }
        rows = await self.store.fetch_as(shard, "materialize_crons", args, tuple_row)
        advanced = frozenset(i for kind, i in rows if kind == "advanced")
        refused = tuple(i for kind, i in rows if kind == "refused")
        created = sum(1 for kind, _ in rows if kind == "created")
        return MaterializeResult(advanced, created, refused)

    @wrap_exceptions
    async def crons_by_owner(self, shard: int, params: OwnerCountsParams) -> dict[str, int]:
        rows = await self.store.fetch(shard, "crons_by_owner", {"limit": params.limit})
        return {r["owner"]: r["n"] for r in rows}

    @wrap_exceptions
    async def prune_occurrences(self, shard: int, params: PruneOccurrencesParams) -> int:
        args = {"before": params.before, "limit": params.limit}
        async with self.store.connection(shard) as conn:
            cur = await conn.execute(QUERIES["purge_cron_occurrences"], args)
            return cur.rowcount

    @wrap_exceptions
    async def last_successes(
        self, shard: int, params: LastSuccessParams
    ) -> list[tuple[uuid.UUID, datetime]]:
        deadline = time.monotonic() + params.fold_budget_seconds
        await self.store.fetch(shard, "summarize_history", {})
        while True:
            [folded] = await self.store.fetch(
                shard,
                "fold_cron_successes",
                {
                    "lag": params.fold_lag_seconds,
                    "limit": params.fold_limit,
                    "read": params.fold_read_rows,
                },
            )
            if not folded["more"] or time.monotonic() > deadline:
                break
        rows = await self.store.fetch_as(shard, "cron_last_success", {"limit": params.limit}, tuple_row)
        return [(cron_id, when) for cron_id, when in rows]


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
