"""Job creates on PostgreSQL: single (keyless ones coalesced), keyed, and
batches; a create whose link failed after it was sent is settled on its
own shard (:meth:`PgCreates._create_again`)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any

from psycopg.rows import scalar_row

from cluster.errors import (
    Conflict,
    IdempotencyKeyExpired,
    IdempotencyKeyReused,
    ShardUnavailable,
    SlotMoving,
    VakitError,
)
from cluster.model import (
    CreateJobParams,
    CreateJobsParams,
    CreateResult,
    JobRecord,
)
from cluster.store.coalesce import Coalescer
from cluster.store.deadline import deadline as ends_by
from cluster.store.pgshards import PgShards, wrap_exceptions
from cluster.store.postgres.rows import (
    _LEAN_INSERTS,
    _batch_args,
    _job_row,
    _record_from_params,
    _record_from_row,
    fetch_job,
    insert_statement,
    lean_values,
)
from cluster.store.sql import QUERIES

__all__ = ["PgCreates"]

# Between the tries of a create whose first try's link failed after it was
# sent; bounded by the shard's request timeout.
_AGAIN_PAUSES = (0.0, 0.2, 0.5, 1.0, 2.0)

# Keyless single creates written at once per shard, and the most in one
# statement (cluster/store/coalesce.py). Two: while one statement waits for
# its commit, the next one takes what arrived meanwhile.
_CREATES_IN_FLIGHT = 2

_CREATES_TOGETHER = 200


def _key_reused(p: CreateJobParams, shard: int) -> Conflict:
    return IdempotencyKeyReused(
        "Idempotency-Key was already used with a different request body; "
        "use a new key for a different job",
        idempotency_key=p.idempotency_key,
        shard=shard,
    )


def _key_expired(p: CreateJobParams, shard: int, job_id: uuid.UUID) -> Conflict:
    return IdempotencyKeyExpired(
        "Idempotency-Key belongs to a job whose history has expired",
        job_id,
        idempotency_key=p.idempotency_key,
        shard=shard,
    )


class PgCreates(PgShards):
    """The creates of :class:`~cluster.store.contracts.intake.JobIntake`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Single creates without a key that arrive while others are being
        # written go together, as one statement (cluster/store/coalesce.py).
        self._creates: Coalescer[CreateJobParams, CreateResult] = Coalescer(
            self._create_keyless, in_flight=_CREATES_IN_FLIGHT, most=_CREATES_TOGETHER
        )

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
            name = "insert_job_again" if again else insert_statement(params)
            started = time.perf_counter()
            try:
                async with self.connection(shard) as conn:
                    sessions.append(conn.pgconn.backend_pid)
                    if again:
                        await conn.execute(QUERIES[name], _job_row(params))
                    else:
                        values = lean_values(params, conn.pgconn._encoding)
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
                    existing = await fetch_job(conn, first_id, params.owner, with_attempts=False)
                    if existing is None:
                        raise _key_expired(params, shard, first_id)
                    return CreateResult(existing, created=False)
                await cur.execute(QUERIES[insert_statement(params)], row)
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
        deadline = ends_by(self.request_timeout)  # the caller's bound, if sooner
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
            except SlotMoving as exc:
                # Fenced since the first try, which may have committed: the
                # create is neither refused nor made, as far as we know.
                raise ShardUnavailable(
                    f"shard {shard}: slot {exc.slot} began moving while a create's commit "
                    "was unknown; the create may have been committed",
                    shard=shard,
                    maybe_written=True,
                ) from exc
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
        key_jobs: dict[tuple[str, str], uuid.UUID] = {}
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
                key_jobs[(r["key_owner"], r["key"])] = r["key_job_id"]
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
                out.append(_key_expired(p, shard, key_jobs[key]))
            else:
                out.append(CreateResult(existing, created=False))
        return out
