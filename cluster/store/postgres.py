"""The PostgreSQL store: one connection pool per shard, named queries only.

psycopg errors are translated here, once (:func:`translate_errors`, and
:func:`wrap_exceptions` on every public method): a shard that cannot be
reached becomes :class:`ShardUnavailable` (the API answers 503, the worker
backs off), a unique violation a :class:`Conflict` naming its constraint,
anything else a :class:`StoreError` with the shard and the SQLSTATE. No
driver exception leaves this module or :mod:`cluster.store.postgres_cron`,
which uses the same two.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

import psycopg
from psycopg import sql
from psycopg.rows import AsyncRowFactory, dict_row, scalar_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from cluster import metrics
from cluster.errors import Conflict, NotFound, ShardUnavailable, StoreError, VakitError
from cluster.model import (
    AttemptRecord,
    BacklogParams,
    BacklogStats,
    CancelParams,
    ClaimedJob,
    ClaimParams,
    CreateJobParams,
    CreateJobsParams,
    CreateResult,
    DueAheadParams,
    DueSecond,
    FinishParams,
    GetJobParams,
    HeartbeatParams,
    JobRecord,
    JobStatus,
    MaintainHistoryParams,
    MaintenanceResult,
    MoveFarParams,
    ReapParams,
    ReapResult,
    ReleaseParams,
    RescheduleParams,
    RevokeReplacedParams,
    WorkerBeatParams,
    WorkersSeenParams,
)
from cluster.store.migrate import LATEST_VERSION
from cluster.store.sql import QUERIES

__all__ = ["BACKLOG_CAP", "PgStore", "translate_errors", "wrap_exceptions"]

BACKLOG_CAP = 1_000_000
# A connection back from use this recently is not checked again before reuse.
_FRESH_SECONDS = 2.0

log = logging.getLogger(__name__)

R = TypeVar("R")
M = TypeVar("M", bound=Callable[..., Coroutine[Any, Any, Any]])
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


@contextmanager
def translate_errors(shard: int) -> Iterator[None]:
    """Turn any psycopg error raised inside into the project's own, once.

    Unavailable → :class:`ShardUnavailable`; a unique violation →
    :class:`Conflict` with ``constraint``; any other psycopg error →
    :class:`StoreError` with ``sqlstate``. Our own errors pass untouched, so
    nesting (a method over :meth:`PgStore.connection`) translates once.
    Works around ``await``s: a plain ``with`` in a coroutine."""
    try:
        yield
    except VakitError:
        raise
    except psycopg.errors.UniqueViolation as exc:
        constraint = exc.diag.constraint_name
        raise Conflict(
            f"unique constraint {constraint} refused the write",
            constraint=constraint,
            shard=shard,
            sqlstate=exc.sqlstate,
        ) from exc
    except psycopg.Error as exc:  # PoolTimeout is one too
        if _unavailable(exc):
            raise ShardUnavailable(
                f"shard {shard} is unavailable: {type(exc).__name__}", shard=shard
            ) from exc
        raise StoreError(
            f"shard {shard}: {type(exc).__name__}: {exc}".strip(),
            shard=shard,
            sqlstate=exc.sqlstate,
        ) from exc


def wrap_exceptions(method: M) -> M:
    """:func:`translate_errors` around a store method whose first argument
    after ``self`` is the shard (procrastinate's ``wrap_exceptions``). The
    method keeps its exact signature, so the class still meets its protocol."""

    @functools.wraps(method)
    async def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        shard = args[0] if args else kwargs["shard"]
        with translate_errors(shard):
            return await method(self, *args, **kwargs)

    return cast(M, wrapped)


class PgStore:
    """The :class:`~cluster.store.base.Store` contract on PostgreSQL shards."""

    latest_schema_version = LATEST_VERSION

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
        """A pooled connection to ``shard`` (autocommit); errors raised in the
        block, by the pool or by a statement, come out translated."""
        if not 0 <= shard < self.shard_count:
            raise ValueError(f"shard {shard} out of range 0..{self.shard_count - 1}")
        with translate_errors(shard):
            async with self._pools[shard].connection() as conn:
                yield conn

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

    @wrap_exceptions
    async def schema_version(self, shard: int) -> int:
        rows = await self.fetch(shard, "schema_version", {})
        return int(rows[0]["version"])

    # -- API side ---------------------------------------------------------

    @wrap_exceptions
    async def create_job(self, shard: int, params: CreateJobParams) -> CreateResult:
        row = _job_row(params)
        if params.idempotency_key is None:
            # One statement in autocommit: a transaction around it would add
            # a BEGIN and a COMMIT round trip, a third of a create's API CPU.
            await self.fetch(shard, "insert_far_job" if params.far else "insert_job", row)
            return CreateResult(_record_from_params(params), created=True)
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
                        raise _key_reused(params, shard)
                    existing = await self._get(conn, first_id, params.owner, with_attempts=False)
                    if existing is None:
                        raise _key_expired(params, shard)
                    return CreateResult(existing, created=False)
            await cur.execute(QUERIES["insert_far_job" if params.far else "insert_job"], row)
        return CreateResult(_record_from_params(params), created=True)

    @wrap_exceptions
    async def create_jobs(
        self, shard: int, params: CreateJobsParams
    ) -> list[CreateResult | Conflict]:
        jobs = params.jobs
        # A key seen earlier in this batch is resolved against that first use
        # below, never sent twice: ON CONFLICT would pick a winner by row order.
        first_of: dict[tuple[str, str], int] = {}
        sent: list[CreateJobParams] = []
        for i, p in enumerate(jobs):
            if p.idempotency_key is not None:
                key = (p.owner, p.idempotency_key)
                if key in first_of:
                    continue
                first_of[key] = i
            sent.append(p)
        not_created: set[uuid.UUID] = set()
        if sent:
            not_created = set(
                await self.fetch_as(shard, "insert_jobs_batch", _batch_args(sent), scalar_row)
            )
        # The key's first body (its fingerprint) and first job, for the keys
        # that existed before this batch.
        ledger: dict[tuple[str, str], tuple[str | None, JobRecord | None]] = {}
        if not_created:
            repeats = [p for p in sent if p.id in not_created]
            rows = await self.fetch(
                shard,
                "get_jobs_by_keys",
                {"owners": [p.owner for p in repeats], "keys": [p.idempotency_key for p in repeats]},
            )
            for r in rows:
                job = _record_from_row(r) if r["id"] is not None else None
                ledger[(r["key_owner"], r["key"])] = (r["key_fingerprint"], job)
        out: list[CreateResult | Conflict] = []
        for i, p in enumerate(jobs):
            if p.idempotency_key is None:
                out.append(CreateResult(_record_from_params(p), created=True))
                continue
            key = (p.owner, p.idempotency_key)
            first = first_of[key]
            if first == i and p.id not in not_created:
                created = CreateResult(_record_from_params(p), created=True)
                out.append(created)
                ledger[key] = (p.fingerprint, created.job)
                continue
            fingerprint, existing = ledger.get(key, (None, None))
            if fingerprint is None:
                # Neither inserted nor found: the key was purged in between.
                out.append(Conflict("Idempotency-Key is being purged; retry", shard=shard))
            elif fingerprint != p.fingerprint:
                out.append(_key_reused(p, shard))
            elif existing is None:
                out.append(_key_expired(p, shard))
            else:
                out.append(CreateResult(existing, created=False))
        return out

    @wrap_exceptions
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
        return _record_from_row(row, attempts)

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

    @wrap_exceptions
    async def reschedule_job(self, shard: int, params: RescheduleParams) -> JobRecord:
        return await self._change(
            shard,
            params.id,
            params.owner,
            ("reschedule_far_job", "reschedule_job"),
            {"id": params.id, "owner": params.owner, "run_at": params.run_at},
            "rescheduled",
        )

    @wrap_exceptions
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

    @wrap_exceptions
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

    @wrap_exceptions
    async def due_ahead(self, shard: int, params: DueAheadParams) -> list[DueSecond]:
        rows = await self.fetch_as(
            shard,
            "due_ahead",
            {"horizon": params.horizon_seconds, "limit": params.limit, "now": params.now},
            tuple_row,
        )
        return [DueSecond(at, jobs) for at, jobs in rows]

    @wrap_exceptions
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

    @wrap_exceptions
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

    @wrap_exceptions
    async def release_jobs(self, shard: int, params: ReleaseParams) -> set[uuid.UUID]:
        leases = params.leases
        rows = await self.fetch_as(
            shard,
            "release_jobs",
            {
                "ids": [x.id for x in leases],
                "attempts": [x.attempt for x in leases],
                "refunds": list(params.refunds) if params.refunds else [False] * len(leases),
                "worker": params.worker,
                "now": params.now,
            },
            scalar_row,
        )
        return set(rows)

    @wrap_exceptions
    async def reap_expired(self, shard: int, params: ReapParams) -> ReapResult:
        rows = await self.fetch(shard, "reap_expired", {"limit": params.limit, "now": params.now})
        return ReapResult(rescheduled=rows[0]["rescheduled"], failed=rows[0]["failed"])

    @wrap_exceptions
    async def move_far_jobs(self, shard: int, params: MoveFarParams) -> int:
        rows = await self.fetch(
            shard,
            "move_far_jobs",
            {"horizon": params.horizon_seconds, "limit": params.limit, "now": params.now},
        )
        return len(rows)

    @wrap_exceptions
    async def backlog(self, shard: int, params: BacklogParams) -> BacklogStats:
        rows = await self.fetch(shard, "backlog", {"now": params.now, "cap": BACKLOG_CAP})
        return BacklogStats(due=rows[0]["due"], oldest_due_age_seconds=float(rows[0]["oldest_age"]))

    @wrap_exceptions
    async def revoke_replaced(self, shard: int, params: RevokeReplacedParams) -> int:
        rows = await self.fetch(
            shard,
            "revoke_replaced",
            {"cron_id": params.cron_id, "keep": params.keep, "now": params.now},
        )
        return len(rows)

    @wrap_exceptions
    async def worker_beat(self, shard: int, params: WorkerBeatParams) -> None:
        await self.fetch(shard, "worker_beat", {"worker": params.worker_id})

    @wrap_exceptions
    async def workers_seen(self, shard: int, params: WorkersSeenParams) -> list[str]:
        rows = await self.fetch(shard, "workers_seen", {"within": params.within_seconds})
        return [r["worker_id"] for r in rows]

    @wrap_exceptions
    async def maintain_history(
        self, shard: int, params: MaintainHistoryParams
    ) -> MaintenanceResult:
        """Day partitions ahead, old ones dropped, old keys purged (the janitor)."""
        result = MaintenanceResult()
        async with self.connection(shard) as conn:
            today = params.today
            if today is None:
                cur = await conn.execute(QUERIES["history_today"], {})
                found = await cur.fetchone()
                assert found is not None
                today = found[0]
            cutoff = today - timedelta(days=params.retention_days)
            cur = await conn.execute(
                QUERIES["ensure_partitions"],
                {"from": today - timedelta(days=1), "to": today + timedelta(days=params.days_ahead)},
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


def _key_reused(p: CreateJobParams, shard: int) -> Conflict:
    return Conflict(
        "Idempotency-Key was already used with a different request body; "
        "use a new key for a different job",
        idempotency_key=p.idempotency_key,
        shard=shard,
    )


def _key_expired(p: CreateJobParams, shard: int) -> Conflict:
    return Conflict(
        "Idempotency-Key belongs to a job whose history has expired",
        idempotency_key=p.idempotency_key,
        shard=shard,
    )


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


# One encoder, made once: json.dumps with any option builds a new one per call.
_JSON = json.JSONEncoder(separators=(",", ":"))


def _batch_args(jobs: Sequence[CreateJobParams]) -> dict[str, Any]:
    """One array per column (insert_jobs_batch), sent in binary."""
    # Clients of the batch API often send one target for many jobs: each
    # distinct object is encoded once.
    encoded: dict[int, str] = {}

    def text(value: Any) -> str:
        found = encoded.get(id(value))
        if found is None:
            found = encoded[id(value)] = _JSON.encode(value)
        return found

    return {
        "ids": [p.id for p in jobs],
        "owners": [p.owner for p in jobs],
        "keys": [p.idempotency_key for p in jobs],
        "fingerprints": [p.fingerprint for p in jobs],
        "types": [p.type for p in jobs],
        "cron_ids": [p.cron_id for p in jobs],
        "scheduled": [p.scheduled_for for p in jobs],
        "run_at": [p.run_at for p in jobs],
        "max_attempts": [p.max_attempts for p in jobs],
        "timeouts": [p.timeout_seconds for p in jobs],
        "target_kinds": [p.target_kind for p in jobs],
        "targets": [text(p.target) for p in jobs],
        "payloads": [text(p.payload) for p in jobs],
        "far": [p.far for p in jobs],
    }


def _record_from_row(row: dict[str, Any], attempts: tuple[AttemptRecord, ...] = ()) -> JobRecord:
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
