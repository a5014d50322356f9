"""The worker's contract on PostgreSQL: claims, forecast, heartbeats,
completions."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from psycopg.rows import scalar_row, tuple_row

import shardmap
from cluster.errors import SlotMoving
from cluster.model import (
    ClaimedJob,
    ClaimParams,
    DueAheadParams,
    DueSecond,
    FinishParams,
    HeartbeatParams,
    ReleaseParams,
    RevokeReplacedParams,
    WorkerBeatParams,
    WorkersSeenParams,
)
from cluster.store.pgshards import PgShards, wrap_exceptions

__all__ = ["PgClaims", "claimed_row"]


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


def claimed_row(cursor: Any) -> Callable[[Sequence[Any]], ClaimedJob]:
    """A claimed row becomes a ClaimedJob directly: the claim's columns come
    in the order of its fields (jobs_claims.sql, claim_jobs), the target as
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


async def _refused_slots(
    store: PgShards, shard: int, asked: Sequence[uuid.UUID], written: set[uuid.UUID]
) -> None:
    """Raise :class:`SlotMoving` when some of ``asked`` were not written
    because their slot is fenced on ``shard`` (the statement skipped them,
    and wrote the others). Only read when a write fell short, which a
    fenced attempt does too: the fences are read after the write, so a
    job lost by its attempt in a slot fenced since then is reported as
    refused; the attempt fence holds on the new owner all the same."""
    if len(written) >= len(asked):
        return
    rows = await store.fetch_as(shard, "fenced_slots", {}, tuple_row)
    if not rows:
        return
    fenced = {slot for slot, _ in rows}
    refused = frozenset(i for i in asked if i not in written and shardmap.slot_of(i) in fenced)
    if refused:
        slot = min(shardmap.slot_of(i) for i in refused)
        raise SlotMoving(shard, slot, written=frozenset(written), refused=refused)


class PgClaims(PgShards):
    """:class:`~cluster.store.contracts.claims.JobClaims` on PostgreSQL shards."""

    @wrap_exceptions
    async def claim_jobs(self, shard: int, params: ClaimParams) -> list[ClaimedJob]:
        args: dict[str, Any] = {
            "worker": params.worker_id,
            "limit": params.limit,
            "lease": params.lease_seconds,
            "grace": params.grace_seconds,
            "prefetch": params.prefetch_seconds,
            "now": params.now,
            "from": params.window[0] if params.window else None,
            "until": params.window[1] if params.window else None,
        }
        if not params.limited:
            # No limit set: the claim as it always was, nothing to pay.
            return await self.fetch_as(shard, "claim_jobs", args, claimed_row)
        args["limited"] = list(params.limited)
        return await self.fetch_as(shard, "claim_jobs_except", args, claimed_row)

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
        held = set(rows)
        await _refused_slots(self, shard, [lease.id for lease in params.leases], held)
        return held

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
        written = set(rows)
        await _refused_slots(self, shard, [r.lease.id for r in results], written)
        return written

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
