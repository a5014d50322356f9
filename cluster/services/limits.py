"""Limits an operator reads and changes at run time (issue 44,
docs/design/limits.md): ``GET/PUT/DELETE /api/v1/limits`` and ``vakit limits``.

A run-time limit is written to every shard (each shard admits its share
of a key's firings by the limit it holds) and is over the configured one
(``VAKIT_TARGET_LIMITS``) until dropped. Workers re-read it within a few
seconds (cluster/worker/admission.py): no restart.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.errors import ShardUnavailable, VakitError
from cluster.model import (
    LimitSetting,
    SetLimitParams,
    TargetLimit,
    effective_concurrency,
    parse_limits,
)
from cluster.services.context import Services

__all__ = ["LimitView", "LimitsView", "drop_limit", "read_limits", "set_limit"]


@dataclass(frozen=True)
class LimitView:
    """A key's limit as it stands: where it comes from ("config" or
    "runtime"), and what the cluster applies (the concurrency rounded to
    whole shares per shard)."""

    key: str
    limit: TargetLimit
    source: str
    effective_concurrency: int | None
    consistent: bool = True  # every shard read holds the same run-time limit


@dataclass(frozen=True)
class LimitsView:
    shards: int
    limits: list[LimitView]
    unreadable: list[int]  # shards whose run-time limits could not be read


async def read_limits(ctx: Services) -> LimitsView:
    """The limits in force: the configured ones, overlaid by the run-time
    ones (read from every shard; a key no shard agrees on is flagged)."""
    store = ctx.store
    configured = parse_limits(ctx.settings.target_limits)
    held: list[dict[str, TargetLimit]] = []
    unreadable: list[int] = []
    for shard in range(store.shard_count):
        try:
            settings: list[LimitSetting] = await store.read_limits(shard)
        except VakitError:
            unreadable.append(shard)
            continue
        held.append({s.key: s.limit for s in settings})
    keys = set(configured).union(*held) if held else set(configured)
    out = []
    for key in sorted(keys):
        seen = [h[key] for h in held if key in h]
        if seen:
            limit, source = seen[0], "runtime"
            consistent = len(seen) == len(held) and all(s == limit for s in seen)
        else:
            limit, source, consistent = configured[key], "config", True
        out.append(
            LimitView(
                key,
                limit,
                source,
                effective_concurrency(limit, store.shard_count),
                consistent,
            )
        )
    return LimitsView(store.shard_count, out, unreadable)


async def _write_everywhere(ctx: Services, params: SetLimitParams) -> None:
    failed: list[int] = []
    for shard in range(ctx.store.shard_count):
        try:
            await ctx.store.set_limit(shard, params)
        except ShardUnavailable:
            failed.append(shard)
    if failed:
        # Written where it could be; the same call again finishes it.
        raise ShardUnavailable(
            f"limit on {params.key!r} not written to shards {failed}: repeat the call",
            shard=failed[0],
        )


async def set_limit(ctx: Services, key: str, limit: TargetLimit) -> LimitsView:
    """Set ``key``'s run-time limit on every shard (idempotent)."""
    await _write_everywhere(ctx, SetLimitParams(key.strip().lower(), limit))
    return await read_limits(ctx)


async def drop_limit(ctx: Services, key: str) -> LimitsView:
    """Drop ``key``'s run-time limit everywhere: the configured one (if
    any) applies again."""
    await _write_everywhere(ctx, SetLimitParams(key.strip().lower(), None))
    return await read_limits(ctx)
