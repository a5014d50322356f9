"""The PostgreSQL store: one connection pool per shard, named queries only.

psycopg errors are translated here, once: a shard that cannot be reached
becomes :class:`ShardUnavailable` (the API answers 503, the worker backs off),
never a 500.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import AsyncRowFactory, dict_row, scalar_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from cluster import metrics
from cluster.errors import Conflict, NotFound, ShardUnavailable, VakitError
from cluster.model import (
    AttemptRecord,
    BacklogStats,
    CancelParams,
    ClaimedJob,
    ClaimParams,
    CreateJobParams,
    CreateResult,
    DueAheadParams,
    DueSecond,
    FinishParams,
    GetJobParams,
    HeartbeatParams,
    JobRecord,
    JobStatus,
    Lease,
    MaintenanceResult,
    ReapResult,
    RescheduleParams,
)
from cluster.store.base import WORKER_SEEN_SECONDS
from cluster.store.sql import QUERIES

__all__ = ["BACKLOG_CAP", "PgStore"]

BACKLOG_CAP = 1_000_000
# A connection back from use this recently is not checked again before reuse.
_FRESH_SECONDS = 2.0

log = logging.getLogger(__name__)

R = TypeVar("R")
# Parsed targets by their JSON text. A wave fires many jobs at few targets:
# each distinct target is parsed once. Shared, so never mutated.
_TARGETS: dict[str, dict[str, Any]] = {}


def _target(text: str) -> dict[str, Any]:
    target = _TARGETS.get(text)
    if target is None:
        if len(_TARGETS) >= 10_000:
            _TARGETS.clear()  # bounded, whatever the targets
        target = _TARGETS[text] = json.loads(text)
    return target


def _claimed_row(cursor: Any) -> Callable[[Sequence[Any]], ClaimedJob]:
    """A claimed row becomes a ClaimedJob directly: the claim's columns come
    in the order of its fields (queries.sql, claim_jobs), the target as
    text."""

    def make(values: Sequence[Any]) -> ClaimedJob:
        id_, attempt, max_attempts, type_, scheduled_for, run_at, timeout, target, *rest = values
        return ClaimedJob(
            id_, attempt, max_attempts, type_, scheduled_for, run_at, timeout, _target(target), *rest
        )

    return make

# Errors that mean "the shard cannot serve us right now", as opposed to a bug:
# connection failures and shutdowns, a pool with no connection to give, and a
# shard that refuses writes (a standby after failover, a read-only database).
_UNAVAILABLE = (psycopg.OperationalError, PoolTimeout, psycopg.errors.ReadOnlySqlTransaction)
# SQLSTATE classes of the same kind: connection exception, insufficient
# resources, operator intervention (shutdown, cancel, cannot connect now).
_UNAVAILABLE_CLASSES = ("08", "53", "57")


def _unavailable(exc: BaseException) -> bool:
    if isinstance(exc, _UNAVAILABLE):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return isinstance(exc, psycopg.Error) and state[:2] in _UNAVAILABLE_CLASSES


class PgStore:
    def __init__(
        self,
        dsns: list[str],
        *,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 5.0,
        name: str = "vakit",
    ) -> None:
        if not dsns:
            raise ValueError("at least one shard DSN is needed (VAKIT_SHARDS)")
        self.shard_count = len(dsns)
        self._returned: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._timers: dict[tuple[int, str], Any] = {}
        self._pool_gauges = [
            tuple(metrics.DB_POOL.labels(str(i), state) for state in ("size", "idle", "waiting"))
            for i in range(self.shard_count)
        ]
        self._pools = [
            AsyncConnectionPool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                timeout=timeout,
                open=False,
                name=f"{name}-shard{i}",
                # A connection that died with its server (restart, failover)
                # is noticed before use, not by the statement that needs it;
                # only idle ones are checked, a round trip per checkout was
                # a tenth of a worker's CPU in a wave.
                check=self._check_if_idle,
                reset=self._stamp,
                # The background refill gives up after a minute; connections
                # are still made on demand, so a shard that comes back later
                # is used again.
                reconnect_timeout=60,
                kwargs={"autocommit": True, "connect_timeout": max(1, int(timeout))},
            )
            for i, dsn in enumerate(dsns)
        ]

    async def _stamp(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._returned[conn] = time.monotonic()

    async def _check_if_idle(self, conn: psycopg.AsyncConnection[Any]) -> None:
        last = self._returned.get(conn)
        if last is not None and time.monotonic() - last < _FRESH_SECONDS:
            return
        await AsyncConnectionPool.check_connection(conn)

    async def open(self) -> None:
        for pool in self._pools:
            # wait=False: a shard that is down at start must not stop the
            # others from serving; the pool keeps reconnecting.
            await pool.open(wait=False)

    async def close(self) -> None:
        for pool in self._pools:
            await pool.close()

    @asynccontextmanager
    async def connection(self, shard: int) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection to ``shard`` (autocommit), errors translated."""
        if not 0 <= shard < self.shard_count:
            raise ValueError(f"shard {shard} out of range 0..{self.shard_count - 1}")
        try:
            async with self._pools[shard].connection() as conn:
                yield conn
        except VakitError:
            raise
        except Exception as exc:
            if _unavailable(exc):
                raise ShardUnavailable(
                    f"shard {shard} is unavailable: {type(exc).__name__}", shard=shard
                ) from exc
            raise

    async def fetch(self, shard: int, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Run the named query ``name`` on ``shard``; rows as dicts."""
        return await self.fetch_as(shard, name, params, dict_row)

    async def fetch_as(
        self, shard: int, name: str, params: dict[str, Any], rows: AsyncRowFactory[R]
    ) -> list[R]:
        """Run the named query ``name`` on ``shard``; rows as ``rows`` makes them."""
        started = time.perf_counter()
        try:
            async with self.connection(shard) as conn, conn.cursor(row_factory=rows) as cur:
                await cur.execute(QUERIES[name], params)
                return await cur.fetchall() if cur.description else []
        finally:
            self._observe(shard, name, time.perf_counter() - started)

    def _observe(self, shard: int, name: str, seconds: float) -> None:
        """The statement's time, and the pool's state as the statement ends
        (children kept: a wave runs a few statements per 500 jobs)."""
        if not 0 <= shard < self.shard_count:
            return  # connection() refused it; let its ValueError through
        key = (shard, name)
        child = self._timers.get(key)
        if child is None:
            child = self._timers[key] = metrics.STORE_QUERY_SECONDS.labels(str(shard), name)
        child.observe(seconds)
        stats = self._pools[shard].get_stats()
        gauges = self._pool_gauges[shard]
        gauges[0].set(stats.get("pool_size", 0))
        gauges[1].set(stats.get("pool_available", 0))
        gauges[2].set(stats.get("requests_waiting", 0))

    # -- API side ---------------------------------------------------------

    async def create_job(self, shard: int, params: CreateJobParams) -> CreateResult:
        row = _job_row(params)
        async with self.connection(shard) as conn, conn.transaction(), conn.cursor() as cur:
            if params.idempotency_key is not None:
                await cur.execute(QUERIES["insert_job_key"], row)
                if await cur.fetchone() is None:
                    # The key exists (a concurrent repeat waited on our unique
                    # index and now sees the committed row).
                    await cur.execute(QUERIES["get_job_key"], row)
                    found = await cur.fetchone()
                    assert found is not None
                    first_id, fingerprint = found
                    if fingerprint != params.fingerprint:
                        raise Conflict(
                            "Idempotency-Key was already used with a different request body; "
                            "use a new key for a different job",
                            idempotency_key=params.idempotency_key,
                            shard=shard,
                        )
                    existing = await self._get(conn, first_id, params.owner, with_attempts=False)
                    if existing is None:
                        raise Conflict(
                            "Idempotency-Key belongs to a job whose history has expired",
                            idempotency_key=params.idempotency_key,
                        )
                    return CreateResult(existing, created=False)
            await cur.execute(QUERIES["insert_far_job" if params.far else "insert_job"], row)
        return CreateResult(_record_from_params(params), created=True)

    async def get_job(self, shard: int, params: GetJobParams) -> JobRecord | None:
        async with self.connection(shard) as conn:
            return await self._get(conn, params.id, params.owner, params.with_attempts)

    async def _get(
        self, conn: psycopg.AsyncConnection[Any], job_id: uuid.UUID, owner: str, with_attempts: bool
    ) -> JobRecord | None:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(QUERIES["get_job"], {"id": job_id, "owner": owner})
            row = await cur.fetchone()
            if row is None:
                return None
            attempts: tuple[AttemptRecord, ...] = ()
            if with_attempts:
                await cur.execute(QUERIES["get_attempts"], {"id": job_id})
                attempts = tuple(AttemptRecord(**a) for a in await cur.fetchall())
        return JobRecord(
            id=row["id"],
            owner=row["owner_service"],
            type=row["type"],
            status=JobStatus(row["status"]),
            run_at=row["run_at"],
            scheduled_for=row["scheduled_for"],
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            timeout_seconds=row["timeout_seconds"],
            target=row["target"],
            payload=row["payload"],
            idempotency_key=row["idempotency_key"],
            cron_id=row["cron_id"],
            last_error=row["last_error"],
            created_at=row["created_at"],
            finished_at=row["finished_at"],
            attempts=attempts,
        )

    async def _change(
        self, shard: int, job_id: uuid.UUID, owner: str, names: tuple[str, str], params: dict[str, Any], verb: str
    ) -> JobRecord:
        async with self.connection(shard) as conn:
            # Far first, then near: the direction a job moves in, so a job the
            # mover carries over between the two statements is still found.
            for name in names:
                cur = await conn.execute(QUERIES[name], params)
                if await cur.fetchone() is not None:
                    job = await self._get(conn, job_id, owner, with_attempts=False)
                    assert job is not None
                    return job
            job = await self._get(conn, job_id, owner, with_attempts=False)
        if job is None:
            raise NotFound("no such job", job_id=str(job_id))
        raise Conflict(
            f"job is {job.status.value}; it can be {verb} only while SCHEDULED",
            job_id=str(job_id),
            job_status=job.status.value,
        )

    async def reschedule_job(self, shard: int, params: RescheduleParams) -> JobRecord:
        return await self._change(
            shard,
            params.id,
            params.owner,
            ("reschedule_far_job", "reschedule_job"),
            {"id": params.id, "owner": params.owner, "run_at": params.run_at},
            "rescheduled",
        )

    async def cancel_job(self, shard: int, params: CancelParams) -> JobRecord:
        return await self._change(
            shard,
            params.id,
            params.owner,
            ("cancel_far_job", "cancel_job"),
            {"id": params.id, "owner": params.owner, "now": params.now},
            "cancelled",
        )

    # -- worker side ------------------------------------------------------

    async def claim_jobs(self, shard: int, params: ClaimParams) -> list[ClaimedJob]:
        return await self.fetch_as(
            shard,
            "claim_jobs",
            {
                "worker": params.worker_id,
                "limit": params.limit,
                "lease": params.lease_seconds,
                "grace": params.grace_seconds,
                "prefetch": params.prefetch_seconds,
                "now": params.now,
                "from": params.window[0] if params.window else None,
                "until": params.window[1] if params.window else None,
            },
            _claimed_row,
        )

    async def due_ahead(self, shard: int, params: DueAheadParams) -> list[DueSecond]:
        rows = await self.fetch_as(
            shard,
            "due_ahead",
            {"horizon": params.horizon_seconds, "limit": params.limit, "now": params.now},
            tuple_row,
        )
        return [DueSecond(at, jobs) for at, jobs in rows]

    async def heartbeat(self, shard: int, params: HeartbeatParams) -> set[uuid.UUID]:
        rows = await self.fetch_as(
            shard,
            "heartbeat",
            {
                "ids": [lease.id for lease in params.leases],
                "attempts": [lease.attempt for lease in params.leases],
                "lease": params.lease_seconds,
                "grace": params.grace_seconds,
                "now": params.now,
            },
            scalar_row,
        )
        return set(rows)

    async def finish_jobs(self, shard: int, params: FinishParams) -> set[uuid.UUID]:
        results = params.results
        rows = await self.fetch_as(
            shard,
            "finish_jobs",
            {
                "ids": [r.lease.id for r in results],
                "attempts": [r.lease.attempt for r in results],
                "outcomes": [r.outcome.value for r in results],
                "errors": [r.error for r in results],
                "delays": [r.retry_delay for r in results],
                "started": [r.started_at for r in results],
                "lateness": [r.lateness_seconds for r in results],
                # One worker writes a batch: a scalar, not an array of copies.
                "worker": results[0].worker if results else None,
                "now": params.now,
            },
            scalar_row,
        )
        return set(rows)

    async def release_jobs(
        self,
        shard: int,
        leases: list[Lease],
        refunds: list[bool] | None = None,
        worker: str | None = None,
    ) -> set[uuid.UUID]:
        rows = await self.fetch_as(
            shard,
            "release_jobs",
            {
                "ids": [x.id for x in leases],
                "attempts": [x.attempt for x in leases],
                "refunds": refunds if refunds is not None else [False] * len(leases),
                "worker": worker,
            },
            scalar_row,
        )
        return set(rows)

    async def reap_expired(self, shard: int, limit: int = 1000, now: datetime | None = None) -> ReapResult:
        rows = await self.fetch(shard, "reap_expired", {"limit": limit, "now": now})
        return ReapResult(rescheduled=rows[0]["rescheduled"], failed=rows[0]["failed"])

    async def move_far_jobs(
        self, shard: int, horizon_seconds: float, limit: int = 1000, now: datetime | None = None
    ) -> int:
        rows = await self.fetch(
            shard, "move_far_jobs", {"horizon": horizon_seconds, "limit": limit, "now": now}
        )
        return len(rows)

    async def backlog(self, shard: int, now: datetime | None = None) -> BacklogStats:
        rows = await self.fetch(shard, "backlog", {"now": now, "cap": BACKLOG_CAP})
        return BacklogStats(due=rows[0]["due"], oldest_due_age_seconds=float(rows[0]["oldest_age"]))

    async def revoke_replaced(self, shard: int, cron_id: uuid.UUID, keep: uuid.UUID) -> int:
        rows = await self.fetch(shard, "revoke_replaced", {"cron_id": cron_id, "keep": keep})
        return len(rows)

    async def schema_version(self, shard: int) -> int:
        rows = await self.fetch(shard, "schema_version", {})
        return int(rows[0]["version"])

    async def worker_beat(self, shard: int, worker_id: str) -> None:
        await self.fetch(shard, "worker_beat", {"worker": worker_id})

    async def workers_seen(self, shard: int, within_seconds: float = WORKER_SEEN_SECONDS) -> list[str]:
        rows = await self.fetch(shard, "workers_seen", {"within": within_seconds})
        return [r["worker_id"] for r in rows]

    async def maintain_history(
        self, shard: int, retention_days: int, today: date | None = None, days_ahead: int = 7
    ) -> MaintenanceResult:
        """Day partitions ahead, old ones dropped, old keys purged (the janitor)."""
        today = today or datetime.now(UTC).date()
        result = MaintenanceResult()
        cutoff = today - timedelta(days=retention_days)
        async with self.connection(shard) as conn:
            cur = await conn.execute(
                QUERIES["ensure_partitions"],
                {"from": today - timedelta(days=1), "to": today + timedelta(days=days_ahead)},
            )
            made = await cur.fetchone()
            result.made_partitions = made[0] if made else 0
            cur = await conn.execute(QUERIES["list_partitions"], {})
            for name, _parent in await cur.fetchall():
                day = datetime.strptime(name[-8:], "%Y%m%d").date()
                if day < cutoff:
                    await conn.execute(
                        sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name))
                    )
                    result.dropped_partitions.append(name)
            before = datetime.combine(cutoff, datetime.min.time(), tzinfo=UTC)
            cur = await conn.execute(QUERIES["purge_default_partitions"], {"before": before})
            purged = await cur.fetchone()
            result.purged_rows = purged[0] if purged else 0
            cur = await conn.execute(QUERIES["purge_job_keys"], {"before": before, "limit": 10000})
            result.purged_keys = cur.rowcount
        return result


def _job_row(p: CreateJobParams) -> dict[str, Any]:
    return {
        "id": p.id,
        "owner": p.owner,
        "key": p.idempotency_key,
        "fingerprint": p.fingerprint,
        "type": p.type,
        "cron_id": p.cron_id,
        "scheduled_for": p.scheduled_for,
        "run_at": p.run_at,
        "max_attempts": p.max_attempts,
        "timeout_seconds": p.timeout_seconds,
        "target_kind": p.target_kind,
        "target": Jsonb(p.target),
        "payload": Jsonb(p.payload),
    }


def _record_from_params(p: CreateJobParams) -> JobRecord:
    return JobRecord(
        id=p.id,
        owner=p.owner,
        type=p.type,
        status=JobStatus.SCHEDULED,
        run_at=p.run_at,
        scheduled_for=p.scheduled_for,
        attempt=0,
        max_attempts=p.max_attempts,
        timeout_seconds=p.timeout_seconds,
        target=p.target,
        payload=p.payload,
        idempotency_key=p.idempotency_key,
        cron_id=p.cron_id,
    )
