"""One-shot jobs: create (one or a batch), read, move, cancel.

The rules of a create live here: the target and payload checks, the
near/far decision, the id's slot (a keyed job's comes from its key, so a
repeat finds the first on the same shard), the Idempotency-Key in flight,
the owner's limits and the failover of a keyless job to another shard.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from datetime import datetime

import shardmap
from cluster import logs, tracing
from cluster.errors import (
    Conflict,
    IdempotencyKeyExpired,
    IdempotencyKeyInFlight,
    InvalidRequest,
    NotFound,
    ShardUnavailable,
    SlotMoving,
    VakitError,
)
from cluster.model import (
    CancelParams,
    CreateJobParams,
    CreateJobsParams,
    CreateResult,
    GetJobParams,
    JobRecord,
    RescheduleParams,
)
from cluster.services.batches import write_by_shard
from cluster.services.context import Services
from cluster.services.documents import target_dict
from cluster.services.job_document import BatchJobIn, CreateJobIn, fingerprint
from cluster.services.routing import on_owner, owner_and

__all__ = [
    "cancel_job",
    "create_job",
    "create_jobs",
    "get_job",
    "job_id_text",
    "locate",
    "parse_job_id",
    "prepare",
    "reschedule_job",
]


def job_id_text(value: uuid.UUID) -> str:
    return shardmap.encode_id("job", value)


def parse_job_id(text: str) -> uuid.UUID:
    """A job's id from its text; the request's later log lines carry it."""
    try:
        jid = shardmap.decode_id("job", text)
        logs.bind(job_id=text)
        return jid
    except ValueError as exc:
        raise NotFound(str(exc)) from exc


def locate(ctx: Services, job_id: str) -> tuple[uuid.UUID, int]:
    """A job's id from its text (404 for a malformed one) and its shard."""
    jid = parse_job_id(job_id)
    return jid, ctx.shards.shard_of(jid)


# A batch item's key is its own: the digest is of the rest of it.
_BATCH_KEY_FIELD = {"idempotencyKey"}


def prepare(
    ctx: Services,
    owner: str,
    body: CreateJobIn,
    key: str | None,
    digest: str | None,
) -> CreateJobParams:
    """The checks a body's schema cannot make (target policy, payload size),
    and the job's parameters. The store places the job in the near or far
    table on its database's clock (DESIGN.md: ``now()`` is the authority),
    not on this host's. A keyed job's id carries its key's slot, so a repeat finds the
    first on the same shard; a keyless one's slot is random
    (:func:`_create_anywhere` draws another for another shard)."""
    target = target_dict(body.target)
    ctx.check_target(target, owner)
    if tracing.ENABLED:
        # The create's trace continues at the firing (cluster/tracing.py).
        parent = tracing.current_traceparent()
        if parent:
            target["traceparent"] = parent
    ctx.check_payload(body.payload)
    run_at = body.run_at()
    return CreateJobParams(
        id=shardmap.new_uuid(shardmap.key_slot(owner, key) if key is not None else None),
        owner=owner,
        type=body.type,
        run_at=run_at,
        scheduled_for=run_at,
        target=target,
        payload=body.payload,
        max_attempts=body.maxAttempts,
        timeout_seconds=body.timeoutSeconds,
        idempotency_key=key,
        fingerprint=digest,
        far_horizon_seconds=ctx.settings.far_horizon_seconds,
        labels=body.labels or None,  # none: NULL, as a job had before labels
    )


async def create_job(ctx: Services, owner: str, body: CreateJobIn, key: str | None) -> CreateResult:
    """Schedule a one-shot job. A repeat with the same Idempotency-Key
    ``key`` returns the first job (``created`` False) and creates nothing."""
    if key is not None and not 1 <= len(key) <= 200:
        raise InvalidRequest("Idempotency-Key must be 1 to 200 characters")
    digest = fingerprint(body) if key is not None else None
    params = prepare(ctx, owner, body, key, digest)
    ctx.limits.admit_jobs(owner)
    if key is None:
        result = await _create_anywhere(ctx, params)
    else:
        result = await _create_keyed(ctx, params, owner, key)
    if result.created:
        ctx.limits.created_jobs(owner, 1)
    return result


async def _create_keyed(
    ctx: Services, params: CreateJobParams, owner: str, key: str
) -> CreateResult:
    # The Idempotency-Key draft: a repeat while the first request with the
    # key is still being served is a 409, not a wait.
    in_flight = (owner, key)
    if in_flight in ctx.keys_in_flight:
        raise IdempotencyKeyInFlight(
            "a request with this Idempotency-Key is still being served; retry once it has "
            "been answered",
            idempotency_key=key,
        )
    ctx.keys_in_flight.add(in_flight)
    try:
        try:
            return await on_owner(ctx, params.id, lambda shard: ctx.store.create_job(shard, params))
        except IdempotencyKeyExpired as exc:
            # The key moved with its slot; the job's history may have stayed
            # on the shard that ran it (a finished job is not moved).
            found = await _elsewhere(ctx, exc, owner) if ctx.shards.epoch > 0 else None
            if found is None:
                raise
            return CreateResult(found, created=False)
    finally:
        ctx.keys_in_flight.discard(in_flight)


async def _elsewhere(ctx: Services, exc: IdempotencyKeyExpired, owner: str) -> JobRecord | None:
    """The job a moved key names, on a shard other than the key's."""
    params = GetJobParams(exc.job_id, owner)
    for shard in range(ctx.store.shard_count):
        if shard != exc.fields.get("shard") and (job := await ctx.store.get_job(shard, params)):
            return job
    return None


async def _create_anywhere(ctx: Services, params: CreateJobParams) -> CreateResult:
    """A job without a key may live on any shard: when its random shard is
    down, try another, so one shard's outage does not refuse new work.

    Only when nothing reached that shard: a create whose link failed after it
    was sent may have committed (the store has tried it again there, by its
    id), and making it on another shard would make it twice. The 503 then
    names the job, which a GET finds if it was made.

    A :class:`~cluster.errors.SlotMoving` (the slot is moving) is refused
    inside the shard's transaction, so nothing was written: the job takes
    another slot, routed by the newest map."""
    tried: set[int] = set()
    last: ShardUnavailable | None = None
    serving = ctx.shards.serving()
    moving = 0
    while len(tried) < len(serving):
        shards = ctx.shards
        if tried and shards.shard_of(params.id) in tried:
            # Another serving shard, by a slot it holds (a shard may hold none).
            shard = next(s for s in serving if s not in tried)
            params = params._replace(id=shardmap.new_uuid(random.choice(shards.slots_of(shard))))
        shard = shards.shard_of(params.id)
        tried.add(shard)
        try:
            return await ctx.store.create_job(shard, params)
        except SlotMoving:
            # Refused inside the shard's transaction: nothing was written.
            # A keyless job may take any slot: draw one that is not moving
            # (this one's shard may still serve others).
            tried.discard(shard)
            params = params._replace(id=shardmap.new_uuid())
            moving += 1
            if moving > 8:
                raise
            continue
        except ShardUnavailable as exc:
            if exc.maybe_written:
                raise ShardUnavailable(
                    f"{exc.message}: job {job_id_text(params.id)} may exist; GET it before "
                    "creating it again",
                    shard=shard,
                    maybe_written=True,
                    job_id=job_id_text(params.id),
                ) from exc
            last = exc
    assert last is not None
    raise last


async def create_jobs(
    ctx: Services, owner: str, jobs: Sequence[tuple[int, BatchJobIn]]
) -> dict[int, CreateResult | Exception]:
    """Schedule many jobs (``(index, item)`` pairs), each with its own key and its own
    outcome by index, written with one statement per shard. Never
    all-or-nothing, except for the owner's limits: the whole batch is
    within them or none of it is written (a 429 the client can retry as it
    is). A job without a key is not retried on another shard: its write
    may have committed."""
    outcomes: dict[int, CreateResult | Exception] = {}
    by_shard: dict[int, list[tuple[int, CreateJobParams]]] = {}
    for index, item in jobs:
        key = item.idempotencyKey
        try:
            digest = fingerprint(item, exclude=_BATCH_KEY_FIELD) if key is not None else None
            params = prepare(ctx, owner, item, key, digest)
        except VakitError as exc:
            outcomes[index] = exc
            continue
        by_shard.setdefault(ctx.shards.shard_of(params.id), []).append((index, params))
    if valid := sum(len(items) for items in by_shard.values()):
        ctx.limits.admit_jobs(owner, valid)

    async def write(shard: int, jobs: list[CreateJobParams]) -> list[CreateResult | Conflict]:
        return await ctx.store.create_jobs(shard, CreateJobsParams(tuple(jobs)))

    outcomes.update(await write_by_shard(by_shard, write))
    if ctx.shards.epoch > 0:
        for index, outcome in list(outcomes.items()):
            if isinstance(outcome, IdempotencyKeyExpired):
                found = await _elsewhere(ctx, outcome, owner)
                if found is not None:
                    outcomes[index] = CreateResult(found, created=False)
    created = sum(1 for o in outcomes.values() if isinstance(o, CreateResult) and o.created)
    ctx.limits.created_jobs(owner, created)
    return outcomes


async def get_job(ctx: Services, owner: str, job_id: str) -> tuple[JobRecord, int]:
    """A job wherever it lives (pending, running or finished), and its shard."""
    jid, shard = locate(ctx, job_id)
    params = GetJobParams(jid, owner)
    job = await ctx.store.get_job(shard, params)
    if job is None and ctx.shards.epoch > 0:
        # Slots have moved: a finished job's history stays on the shard that
        # ran it, so the others are asked too (only for a job not found).
        for other in range(ctx.store.shard_count):
            if other != shard and (job := await ctx.store.get_job(other, params)) is not None:
                return job, other
    if job is None:
        raise NotFound("no such job", job_id=job_id)
    return job, shard


async def reschedule_job(
    ctx: Services, owner: str, job_id: str, run_at: datetime
) -> tuple[JobRecord, int]:
    """Move ``run_at``; only while the job is SCHEDULED (else 409)."""
    jid, _ = locate(ctx, job_id)
    params = RescheduleParams(jid, owner, run_at)
    return await owner_and(ctx, jid, lambda shard: ctx.store.reschedule_job(shard, params))


async def cancel_job(ctx: Services, owner: str, job_id: str) -> tuple[JobRecord, int]:
    """Cancel a job that has not started (409 once it has)."""
    jid, _ = locate(ctx, job_id)
    params = CancelParams(jid, owner)
    return await owner_and(ctx, jid, lambda shard: ctx.store.cancel_job(shard, params))
