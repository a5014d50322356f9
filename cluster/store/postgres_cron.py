"""Cron definitions and occurrences in PostgreSQL, on the shards' pools.

Kept apart from :mod:`cluster.store.postgres` (one concept per module) but sharing
its pools and its error translation.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from cluster.errors import Conflict, NotFound
from cluster.model import CronRecord, CronRun, MaterializeParams, Occurrence, PendingInfo
from cluster.store.postgres import PgStore
from cluster.store.sql import QUERIES

__all__ = ["PgCronStore"]


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
        "target": Jsonb(c.target),
        "payload": Jsonb(c.payload),
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
    }


class PgCronStore:
    def __init__(self, store: PgStore) -> None:
        self.store = store

    async def _rows(self, shard: int, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return await self.store.fetch(shard, name, params)

    async def create(self, shard: int, cron: CronRecord) -> tuple[CronRecord, bool]:
        """Insert; a definition with the same name and body returns the existing
        one (``created=False``); the same name with another body is a Conflict."""
        rows = await self._rows(shard, "insert_cron", _cron_row(cron))
        if rows:
            return CronRecord.from_row(rows[0]), True
        found = await self._rows(shard, "get_cron_by_name", {"owner": cron.owner, "name": cron.name})
        if not found:  # deleted between the two statements; let the client retry
            raise Conflict("cron job was being deleted; retry", name=cron.name)
        existing = CronRecord.from_row(found[0])
        if existing.fingerprint != cron.fingerprint:
            raise Conflict(
                f"a cron job named {cron.name!r} exists with a different definition; "
                "PATCH it, or choose another name",
                cron_job_id=existing.id_text,
            )
        return existing, False

    async def get(self, shard: int, cron_id: uuid.UUID, owner: str) -> CronRecord | None:
        rows = await self._rows(shard, "get_cron", {"id": cron_id, "owner": owner})
        return CronRecord.from_row(rows[0]) if rows else None

    async def list_page(self, shard: int, owner: str, after: str, limit: int) -> list[CronRecord]:
        rows = await self._rows(shard, "list_crons", {"owner": owner, "after": after, "limit": limit})
        return [CronRecord.from_row(r) for r in rows]

    async def update(self, shard: int, cron: CronRecord) -> CronRecord:
        rows = await self._rows(shard, "update_cron", _cron_row(cron))
        if not rows:
            raise NotFound("no such cron job", cron_job_id=cron.id_text)
        return CronRecord.from_row(rows[0])

    async def delete(self, shard: int, cron_id: uuid.UUID, owner: str) -> int:
        """Delete the definition and cancel its occurrences not yet started."""
        async with self.store.connection(shard) as conn, conn.transaction():
            cur = await conn.execute(QUERIES["delete_cron"], {"id": cron_id, "owner": owner})
            if await cur.fetchone() is None:
                raise NotFound("no such cron job")
            cur = await conn.execute(QUERIES["cancel_cron_occurrences"], {"id": cron_id})
            return len(await cur.fetchall())

    async def due(self, shard: int, now: datetime | None, lookahead: float, limit: int) -> list[CronRecord]:
        rows = await self._rows(shard, "due_crons", {"now": now, "lookahead": lookahead, "limit": limit})
        return [CronRecord.from_row(r) for r in rows]

    async def waiting_fixed_delay(self, shard: int, limit: int) -> list[CronRecord]:
        rows = await self._rows(shard, "waiting_fixed_delay_crons", {"limit": limit})
        return [CronRecord.from_row(r) for r in rows]

    async def pending(self, shard: int, cron_id: uuid.UUID) -> PendingInfo:
        [row] = await self._rows(shard, "cron_pending", {"id": cron_id})
        return PendingInfo(row["pending"], row["last_finished"])

    async def materialize(self, shard: int, params: MaterializeParams) -> int | None:
        """Insert occurrences and advance ``next_fire_at`` in one transaction.

        Returns how many occurrences were created, or None when another
        materializer moved the cron first (the compare-and-set failed) or the
        FORBID index refused a second pending occurrence: nothing is written.
        """
        occ = params.occurrences
        try:
            async with self.store.connection(shard) as conn, conn.transaction():
                created = 0
                if occ:
                    cur = await conn.execute(
                        QUERIES["insert_occurrences"],
                        {
                            "cron_id": params.cron_id,
                            "job_ids": [o.job_id for o in occ],
                            "scheduled": [o.scheduled_for for o in occ],
                            "run_at": [o.run_at for o in occ],
                            "deadline": [o.deadline_at for o in occ],
                        },
                    )
                    created = len(await cur.fetchall())
                cur = await conn.execute(
                    QUERIES["advance_cron"],
                    {
                        "id": params.cron_id,
                        "expected": params.expected_next,
                        "next": params.next_fire_at,
                        "last_fire": params.last_fire,
                        "missed": params.missed,
                        "skipped": params.skipped,
                    },
                )
                if await cur.fetchone() is None:
                    raise _LostRace
                return created
        except (_LostRace, psycopg.errors.UniqueViolation):
            return None

    async def trigger(self, shard: int, cron: CronRecord, occurrence: Occurrence) -> bool:
        """One extra occurrence now; False if that instant already has one."""
        try:
            rows = await self._rows(
                shard,
                "insert_occurrences",
                {
                    "cron_id": cron.id,
                    "job_ids": [occurrence.job_id],
                    "scheduled": [occurrence.scheduled_for],
                    "run_at": [occurrence.run_at],
                    "deadline": [occurrence.deadline_at],
                },
            )
        except psycopg.errors.UniqueViolation as exc:
            raise Conflict(
                "concurrency is FORBID and an occurrence of this cron job is pending or running",
                cron_job_id=cron.id_text,
            ) from exc
        return bool(rows)

    async def runs(self, shard: int, cron_id: uuid.UUID, limit: int) -> list[CronRun]:
        rows = await self._rows(shard, "cron_runs", {"id": cron_id, "limit": limit})
        return [CronRun(job_id=r.pop("id"), **r) for r in rows]

    async def last_successes(self, shard: int) -> list[tuple[uuid.UUID, datetime]]:
        rows = await self._rows(shard, "cron_last_success", {})
        return [(r["id"], r["last_success_at"]) for r in rows]


class _LostRace(Exception):
    """Another materializer advanced this cron first; roll back."""
