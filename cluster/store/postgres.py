"""The job store on PostgreSQL: the :class:`~cluster.store.base.Store`
contract as named queries, on the shards' pools (:mod:`.pgshards`).

Every public method is wrapped by :func:`~cluster.store.pgshards.wrap_exceptions`:
no driver exception leaves this module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import struct
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row, scalar_row, tuple_row
from psycopg.types.json import Jsonb

from cluster.errors import Conflict, IdempotencyKeyReused, NotFound, ShardUnavailable, VakitError
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
    JobSearchParams,
    JobStatus,
    LatenessMinute,
    LatenessParams,
    MaintainHistoryParams,
    MaintenanceResult,
    MoveFarParams,
    OwnerCountsParams,
    PauseJobParams,
    ReapParams,
    ReapResult,
    ReleaseParams,
    RescheduleParams,
    ResumeJobParams,
    RetryJobParams,
    RevokeReplacedParams,
    WorkerBeatParams,
    WorkersSeenParams,
)
from cluster.model.jsontext import json_bytes, json_text
from cluster.store.coalesce import Coalescer
from cluster.store.pgshards import PgShards, wrap_exceptions
from cluster.store.sql import QUERIES
from cluster.store.watched import Statement

__all__ = ["BACKLOG_CAP", "PgStore", "search_statements"]

BACKLOG_CAP = 1_000_000
# Between the tries of a create whose first try's link failed after it was
# sent; bounded by the shard's request timeout.
_AGAIN_PAUSES = (0.0, 0.2, 0.5, 1.0, 2.0)
# Keyless single creates written at once per shard, and the most in one
# statement (cluster/store/coalesce.py). Two: while one statement waits for
# its commit, the next one takes what arrived meanwhile.
_CREATES_IN_FLIGHT = 2
_CREATES_TOGETHER = 200
# The search's open bounds: every UUID is below the first, every time inside the others.
_ABOVE_ALL_IDS = uuid.UUID(int=(1 << 128) - 1)
_NO_BOUND = (datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC))
# How much earlier than its runAt a job that ran may have finished by the
# database's clock: a worker whose clock is ahead fires early. Generous.
_RAN_MARGIN = timedelta(hours=1)
# The janitor's advisory lock on a shard (history_lock); any constant that
# no other lock of ours uses ("VAKIT" is the migrations').
_HISTORY_LOCK_KEY = 0x56414B4954_4A

log = logging.getLogger(__name__)

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
            id_,
            attempt,
            max_attempts,
            type_,
            scheduled_for,
            run_at,
            timeout,
            _target(target),
            *rest,
        )

    return make


class PgStore(PgShards):
    """The :class:`~cluster.store.base.Store` contract on PostgreSQL shards."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Single creates without a key that arrive while others are being
        # written go together, as one statement (cluster/store/coalesce.py).
        self._creates: Coalescer[CreateJobParams, CreateResult] = Coalescer(
            self._create_keyless, in_flight=_CREATES_IN_FLIGHT, most=_CREATES_TOGETHER
        )

    # -- API side ---------------------------------------------------------

    @wrap_exceptions
    async def create_job(self, shard: int, params: CreateJobParams) -> CreateResult:
        if params.idempotency_key is None:
            return await self._creates.submit(shard, params)
        return await self._create_single(shard, params)

    async def _create_keyless(
        self, shard: int, jobs: list[CreateJobParams]
    ) -> Sequence[CreateResult | BaseException]:
        """Keyless creates that arrived together: one statement, each job its
        own outcome. Alone, a create is the single statement it always was."""
        if len(jobs) == 1:
            try:
                return [await self._create_single(shard, jobs[0])]
            except VakitError as exc:
                return [exc]
        sessions: list[int] = []
        started = time.perf_counter()
        try:
            async with self.connection(shard) as conn:
                sessions.append(conn.pgconn.backend_pid)
                await conn.execute(QUERIES["insert_jobs_batch"], _batch_args(jobs))
        except ShardUnavailable as exc:
            if not exc.maybe_written:
                return [exc] * len(jobs)  # nothing reached the shard: another may take them
            # Sent, and maybe committed: each job settles on this shard as a
            # single create whose link failed would (by its id).
            return await asyncio.gather(
                *(self._create_again(shard, p, list(sessions), exc) for p in jobs),
                return_exceptions=True,
            )
        except VakitError:
            # The shard refused the statement (no valid create should make it
            # do so): each job on its own, so only the one at fault fails.
            return await asyncio.gather(
                *(self._create_single(shard, p) for p in jobs), return_exceptions=True
            )
        finally:
            self._observe(shard, "insert_jobs_batch", time.perf_counter() - started)
        return [CreateResult(_record_from_params(p), created=True) for p in jobs]

    async def _create_single(self, shard: int, params: CreateJobParams) -> CreateResult:
        sessions: list[int] = []
        try:
            return await self._create_once(shard, params, sessions)
        except ShardUnavailable as exc:
            if not exc.maybe_written:
                raise
            return await self._create_again(shard, params, sessions, exc)

    async def _create_once(
        self,
        shard: int,
        params: CreateJobParams,
        sessions: list[int],
        again: bool = False,
    ) -> CreateResult:
        """One try; ``sessions`` gets the server session it used. Only the
        statements run through psycopg take the values as a row (_job_row)."""
        if params.idempotency_key is None:
            # One statement in autocommit: a transaction around it would add
            # a BEGIN and a COMMIT round trip, a third of a create's API CPU.
            name = "insert_job_again" if again else "insert_far_job" if params.far else "insert_job"
            started = time.perf_counter()
            try:
                async with self.connection(shard) as conn:
                    sessions.append(conn.pgconn.backend_pid)
                    if again:
                        await conn.execute(QUERIES[name], {**_job_row(params), "far": params.far})
                    else:
                        values = _job_values(params, conn.pgconn._encoding)
                        await conn.run(_LEAN_INSERTS[name], values)
            finally:
                self._observe(shard, name, time.perf_counter() - started)
            return CreateResult(_record_from_params(params), created=True)
        row = _job_row(params)
        async with self.connection(shard) as conn:
            sessions.append(conn.pgconn.backend_pid)
            async with conn.transaction(), conn.cursor() as cur:
                await cur.execute(QUERIES["insert_job_key"], row)
                if await cur.fetchone() is None:
                    # The key exists (a concurrent repeat waited on our unique
                    # index and now sees the committed row, or our own first
                    # try committed before its link failed).
                    await cur.execute(QUERIES["get_job_key"], row)
                    found = await cur.fetchone()
                    assert found is not None
                    first_id, fingerprint = found
                    if first_id == params.id:
                        return CreateResult(_record_from_params(params), created=True)
                    if fingerprint != params.fingerprint:
                        raise _key_reused(params, shard)
                    existing = await self._get(conn, first_id, params.owner, with_attempts=False)
                    if existing is None:
                        raise _key_expired(params, shard)
                    return CreateResult(existing, created=False)
                await cur.execute(QUERIES["insert_far_job" if params.far else "insert_job"], row)
        return CreateResult(_record_from_params(params), created=True)

    async def _create_again(
        self,
        shard: int,
        params: CreateJobParams,
        sessions: list[int],
        first: ShardUnavailable,
    ) -> CreateResult:
        """The link failed after a create was sent: it may have committed.

        Retried on the same shard only, where it finds its own first try:
        the job's id is the keyless create's idempotency key (``insert_job_again``
        inserts nothing when the id exists, finished jobs included), and a
        keyed create recognises its own job under its key. The sessions of
        the failed tries are ended first, so a statement the network still
        holds cannot run after this decision. Still unreachable within the
        shard's request bound: the error stays ``maybe_written``."""
        deadline = time.monotonic() + self.request_timeout
        last = first
        for pause in _AGAIN_PAUSES:
            if time.monotonic() + pause > deadline:
                break
            await asyncio.sleep(pause)
            try:
                while sessions:
                    await self.fetch(shard, "end_session", {"pid": sessions[-1]})
                    sessions.pop()
                return await self._create_once(shard, params, sessions, again=True)
            except ShardUnavailable as exc:
                last = exc
        raise ShardUnavailable(
            f"{last.message}; the create may have been committed", shard=shard, maybe_written=True
        ) from last

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
                {
                    "owners": [p.owner for p in repeats],
                    "keys": [p.idempotency_key for p in repeats],
                },
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
        self,
        shard: int,
        job_id: uuid.UUID,
        owner: str,
        names: tuple[str, str],
        params: dict[str, Any],
        verb: str,
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

    # -- operators --------------------------------------------------------

    @wrap_exceptions
    async def search_jobs(self, shard: int, params: JobSearchParams) -> list[JobRecord]:
        statements = search_statements(params)
        started = time.perf_counter()
        try:
            async with (
                self.connection(shard) as conn,
                conn.transaction(),
                conn.cursor(row_factory=dict_row) as cur,
            ):
                await cur.execute(QUERIES["search_plan"])
                rows: list[dict[str, Any]] = []
                for name, args in statements:
                    await cur.execute(QUERIES[name], args, prepare=True)
                    rows += await cur.fetchall()
                if len(statements) > 1:
                    rows.sort(key=lambda r: r["id"], reverse=True)
                    del rows[params.limit :]
                attempts: dict[uuid.UUID, list[AttemptRecord]] = {}
                if params.with_attempts and rows:
                    await cur.execute(QUERIES["get_attempts_of"], {"ids": [r["id"] for r in rows]})
                    for a in await cur.fetchall():
                        attempts.setdefault(a.pop("job_id"), []).append(AttemptRecord(**a))
        finally:
            self._observe(shard, "search_jobs", time.perf_counter() - started)
        return [_record_from_row(r, tuple(attempts.get(r["id"], ()))) for r in rows]

    @wrap_exceptions
    async def retry_job(self, shard: int, params: RetryJobParams) -> JobRecord:
        args = {
            "id": params.id,
            "owner": params.owner,
            "statuses": sorted(x.value for x in params.statuses),
            "max_attempts": params.max_attempts,
            "run_at": params.run_at,
            "by": params.by,
            "now": params.now,
        }
        async with self.connection(shard) as conn:
            cur = await conn.execute(QUERIES["retry_job"], args)
            revived = await cur.fetchone() is not None
            job = await self._get(conn, params.id, params.owner, with_attempts=False)
        if job is None:
            raise NotFound("no such job", job_id=str(params.id))
        if not revived:
            raise _not_retryable(job, params)
        return job

    @wrap_exceptions
    async def pause_job(self, shard: int, params: PauseJobParams) -> JobRecord:
        args = {"id": params.id, "owner": params.owner, "reason": params.reason, "now": params.now}
        async with self.connection(shard) as conn, conn.transaction():
            cur = await conn.execute(QUERIES["pause_far_job"], args)
            if await cur.fetchone() is None:
                cur = await conn.execute(QUERIES["move_job_far"], args)
                if await cur.fetchone() is not None:
                    await conn.execute(QUERIES["pause_far_job"], args)
            job = await self._get(conn, params.id, params.owner, with_attempts=False)
        return _paused_or_refused(job, params.id, paused=True)

    @wrap_exceptions
    async def resume_job(self, shard: int, params: ResumeJobParams) -> JobRecord:
        args = {
            "id": params.id,
            "owner": params.owner,
            "now": params.now,
            "horizon": params.far_horizon_seconds,
        }
        async with self.connection(shard) as conn, conn.transaction():
            await conn.execute(QUERIES["resume_far_job"], args)
            await conn.execute(QUERIES["move_job_near"], args)
            job = await self._get(conn, params.id, params.owner, with_attempts=False)
        return _paused_or_refused(job, params.id, paused=False)

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
        row = rows[0]
        return ReapResult(
            rescheduled=row["rescheduled"],
            failed=row["failed"],
            failed_by=tuple(sorted((o, k, int(n)) for o, k, n in row["failed_by"])),
        )

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
        cap = BACKLOG_CAP if params.cap is None else params.cap
        rows = await self.fetch(shard, "backlog", {"now": params.now, "cap": cap})
        return BacklogStats(due=rows[0]["due"], oldest_due_age_seconds=float(rows[0]["oldest_age"]))

    @wrap_exceptions
    async def start_lateness(self, shard: int, params: LatenessParams) -> list[LatenessMinute]:
        rows = await self.fetch(shard, "start_lateness", {"minutes": params.minutes, "now": params.now})
        return [
            LatenessMinute(r["minute"], r["n"], r["pct"][0], r["pct"][1], r["worst"]) for r in rows
        ]

    @wrap_exceptions
    async def pending_by_owner(self, shard: int, params: OwnerCountsParams) -> dict[str, int]:
        rows = await self.fetch(shard, "pending_by_owner", {"limit": params.limit})
        return {r["owner"]: r["n"] for r in rows}

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
        """Day partitions ahead, old ones dropped, old keys purged (the janitor).

        One pass at a time on a shard, under a session advisory lock: a
        second janitor waits and then finds the work done."""
        async with self.connection(shard) as conn:
            lock = {"key": _HISTORY_LOCK_KEY}
            await conn.execute(QUERIES["history_lock"], lock)
            try:
                return await self._maintain_history(conn, params)
            finally:
                # A severed connection has dropped the lock with its session.
                if not conn.closed:
                    await conn.execute(QUERIES["history_unlock"], lock)

    async def _maintain_history(
        self, conn: psycopg.AsyncConnection[Any], params: MaintainHistoryParams
    ) -> MaintenanceResult:
        result = MaintenanceResult()
        today = params.today
        if today is None:
            cur = await conn.execute(QUERIES["history_today"], {})
            found = await cur.fetchone()
            assert found is not None
            today = found[0]
        cutoff = today - timedelta(days=params.retention_days)
        cur = await conn.execute(
            QUERIES["ensure_partitions"],
            {
                "from": today - timedelta(days=1),
                "to": today + timedelta(days=params.days_ahead),
            },
        )
        made = await cur.fetchone()
        result.made_partitions = made[0] if made else 0
        cur = await conn.execute(QUERIES["list_partitions"], {})
        for name, _parent in await cur.fetchall():
            day = datetime.strptime(name[-8:], "%Y%m%d").date()
            if day < cutoff:
                await conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
                result.dropped_partitions.append(name)
        before = datetime.combine(cutoff, datetime.min.time(), tzinfo=UTC)
        cur = await conn.execute(QUERIES["purge_default_partitions"], {"before": before})
        purged = await cur.fetchone()
        result.purged_rows = purged[0] if purged else 0
        result.cutoff = before
        # In batches of their own statements, as many as expired: a cap of
        # one batch a pass (the janitor's pass is hourly) let keys pile up
        # past 240,000 keyed creates a day.
        for _ in range(params.batches):
            cur = await conn.execute(QUERIES["purge_job_keys"], {"before": before, "limit": params.batch})
            result.purged_keys += cur.rowcount
            if cur.rowcount < params.batch:
                break
        return result


def search_statements(params: JobSearchParams) -> list[tuple[str, dict[str, Any]]]:
    """The statements a search runs on a shard, each a query name and its
    arguments: one page each, merged newest first. benchmarks.search
    EXPLAINs these same statements, so it cannot drift from them."""
    finished = params.finished_from is not None or params.finished_to is not None
    args: dict[str, Any] = {
        "owner": params.owner,
        "before": params.before or _ABOVE_ALL_IDS,
        "type": params.type,
        "cron_id": params.cron_id,
        "run_from": params.run_at_from or _NO_BOUND[0],
        "run_to": params.run_at_to or _NO_BOUND[1],
        # Hot and far rows have not finished: any finished bound leaves them out.
        "finished": False if finished else None,
        "finished_from": params.finished_from or _NO_BOUND[0],
        "finished_to": params.finished_to or _NO_BOUND[1],
        "limit": params.limit,
    }
    # A job that ran finished after its runAt: a runAt bound also
    # bounds the finish of every status but CANCELLED, and so prunes
    # the history's day partitions (search_jobs).
    args["ran_from"] = args["finished_from"]
    if params.run_at_from is not None and params.run_at_from > _NO_BOUND[0] + _RAN_MARGIN:
        args["ran_from"] = max(args["finished_from"], params.run_at_from - _RAN_MARGIN)
    if params.cron_id is not None:
        # A cron's rows come from the cron indexes, whatever the status.
        return [
            ("search_jobs_of_cron", {**args, "status": status.value if status else None})
            for status in params.statuses or (None,)
        ]
    if params.statuses is None:
        return [("search_jobs", args)]
    out: list[tuple[str, dict[str, Any]]] = []
    for status in params.statuses:
        each = {**args, "status": status.value}
        if status is not JobStatus.CANCELLED:
            each["finished_from"] = args["ran_from"]
        out.append(("search_jobs_in_status", each))
    return out


def _not_retryable(job: JobRecord, params: RetryJobParams) -> Conflict:
    if job.status in params.statuses and job.attempt >= 100:
        return Conflict(
            "job has used the 100 attempts a job may have over all its lives",
            job_id=str(job.id),
            job_status=job.status.value,
        )
    allowed = " or ".join(sorted(x.value for x in params.statuses))
    return Conflict(
        f"job is {job.status.value}; only a {allowed} job can be retried",
        job_id=str(job.id),
        job_status=job.status.value,
    )


def _paused_or_refused(job: JobRecord | None, job_id: uuid.UUID, *, paused: bool) -> JobRecord:
    """Pause and resume are idempotent: a paused job paused again (a resumed
    one resumed again) is returned as it is. A job that is not SCHEDULED, or
    a cron occurrence (pause its cron), is a Conflict."""
    if job is None:
        raise NotFound("no such job", job_id=str(job_id))
    verb = "paused" if paused else "resumed"
    if job.cron_id is not None:
        raise Conflict(
            f"a cron job's occurrence cannot be {verb} alone; pause or resume its cron job",
            job_id=str(job_id),
        )
    if job.status is not JobStatus.SCHEDULED:
        raise Conflict(
            f"job is {job.status.value}; it can be {verb} only while SCHEDULED",
            job_id=str(job_id),
            job_status=job.status.value,
        )
    return job


def _key_reused(p: CreateJobParams, shard: int) -> Conflict:
    return IdempotencyKeyReused(
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


def _job_fields(p: CreateJobParams) -> dict[str, Any]:
    """A create's parameters: the single statements' and each row of a batch."""
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
        "target": p.target,
        "payload": p.payload,
    }


def _positional(name: str) -> tuple[str, tuple[str, ...]]:
    """A named query with its ``%(x)s`` placeholders as ``$1``, ``$2``…
    (what :meth:`WatchedConnection.run` takes), and the names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, QUERIES[name]), tuple(names)


# A keyless single create's two statements, run through WatchedConnection.run
# with _job_values: uuids and instants in binary (16 bytes; microseconds
# since 2000 as eight), a quarter of the cost of their text; the rest text.
_JOB_COLUMNS = (
    "id", "owner", "key", "type", "cron_id", "scheduled_for", "run_at",
    "max_attempts", "timeout_seconds", "target_kind", "target", "payload",
)  # fmt: skip
_JOB_FORMATS = tuple(1 if c in ("id", "cron_id", "scheduled_for", "run_at") else 0 for c in _JOB_COLUMNS)


def _lean_insert(name: str) -> Statement:
    """``name`` as a statement for :meth:`WatchedConnection.run`, checked to
    take the values :func:`_job_values` writes, in its order."""
    sql, names = _positional(name)
    if names != _JOB_COLUMNS:
        raise RuntimeError(f"{name} takes {names}, not _job_values' {_JOB_COLUMNS}")
    return Statement(name, sql, _JOB_FORMATS)


_LEAN_INSERTS = {name: _lean_insert(name) for name in ("insert_job", "insert_far_job")}
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_INT8 = struct.Struct("!q").pack


def _pg_instant(at: datetime) -> bytes:
    """``at`` (aware) as timestamptz's binary form."""
    since = at - _PG_EPOCH
    return _INT8((since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds)


def _job_values(p: CreateJobParams, encoding: str) -> list[bytes | None]:
    """A create's values in ``insert_job``'s order and formats: what
    psycopg's adaptation of :func:`_job_row` sends, without it."""
    key = p.idempotency_key
    return [
        p.id.bytes,
        p.owner.encode(encoding),
        None if key is None else key.encode(encoding),
        p.type.encode(encoding),
        None if p.cron_id is None else p.cron_id.bytes,
        _pg_instant(p.scheduled_for),
        _pg_instant(p.run_at),
        b"%d" % p.max_attempts,
        b"%d" % p.timeout_seconds,
        p.target_kind.encode(encoding),
        json_bytes(p.target),
        json_bytes(p.payload),
    ]


def _job_row(p: CreateJobParams) -> dict[str, Any]:
    row = _job_fields(p)
    # orjson's text (json_bytes), not psycopg's default json.dumps: a tenth
    # of the CPU, two values a create.
    row["target"] = Jsonb(p.target, json_bytes)
    row["payload"] = Jsonb(p.payload, json_bytes)
    return row


# insert_jobs_batch's rows are arrays: a job's values in this order, which
# the statement is checked to read when the module loads.
_BATCH_COLUMNS = (
    "id", "owner_service", "idempotency_key", "fingerprint", "type", "cron_id",
    "scheduled_for", "run_at", "max_attempts", "timeout_seconds", "target_kind",
    "target", "payload", "far",
)  # fmt: skip


def _check_batch_columns(name: str) -> None:
    """Raise unless statement ``name`` reads :data:`_BATCH_COLUMNS` from a row
    array, each at its position (``(r->>0)::uuid AS id``, ``r->>1 AS …``)."""
    found = re.findall(r"\br->>?(\d+)\)?(?:::\w+)? AS (\w+)", QUERIES[name])
    columns = tuple(column for _, column in found)
    if [int(at) for at, _ in found] != list(range(len(found))) or columns != _BATCH_COLUMNS:
        raise RuntimeError(f"{name} reads {found}, not _batch_row's {_BATCH_COLUMNS}")


_check_batch_columns("insert_jobs_batch")


def _batch_row(p: CreateJobParams) -> list[Any]:
    """A job as a row of insert_jobs_batch: the values of :func:`_job_fields`
    and ``far``, in :data:`_BATCH_COLUMNS`' order."""
    return [
        p.id, p.owner, p.idempotency_key, p.fingerprint, p.type, p.cron_id, p.scheduled_for,
        p.run_at, p.max_attempts, p.timeout_seconds, p.target_kind, p.target, p.payload, p.far,
    ]  # fmt: skip


def _batch_args(jobs: Sequence[CreateJobParams]) -> dict[str, Any]:
    """The batch as one JSON array of rows (insert_jobs_batch)."""
    return {"rows": json_text([_batch_row(p) for p in jobs])}


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
        paused_at=row.get("paused_at"),
        pause_reason=row.get("pause_reason"),
    )


# A created job's record: one per job a create writes, 1,000 in a batch. A
# frozen dataclass's __init__ sets the 19 fields one object.__setattr__ at a
# time (4.4 us); filling the new record's __dict__ at once makes the same
# object in 0.4 us. test_record_from_params holds it equal to the record
# __init__ makes, so a field added to JobRecord cannot be missed here.
_RECORD_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(JobRecord) if f.default is not dataclasses.MISSING
}


def _record_from_params(p: CreateJobParams) -> JobRecord:
    record: JobRecord = object.__new__(JobRecord)
    fields = record.__dict__
    fields.update(_RECORD_DEFAULTS)
    fields.update(
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
    return record
