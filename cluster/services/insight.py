"""What operators read of the cluster: start lateness by minute, per shard
and the worst shard's, from the attempt logs of every shard."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cluster.errors import VakitError
from cluster.model import LatenessMinute, LatenessParams
from cluster.services.context import Services

__all__ = ["Lateness", "ShardLateness", "start_lateness"]


@dataclass(frozen=True)
class ShardLateness:
    shard: int
    minutes: list[LatenessMinute]
    error: str | None = None  # the shard could not be read


@dataclass(frozen=True)
class Lateness:
    """Per shard, and by minute across shards: the count summed, each
    percentile the worst shard's (a percentile of percentiles would lie)."""

    shards: list[ShardLateness]
    cluster: list[LatenessMinute]

    @property
    def missing(self) -> list[int]:
        return [s.shard for s in self.shards if s.error is not None]


async def start_lateness(ctx: Services, minutes: int) -> Lateness:
    """The last ``minutes`` UTC minutes, the current one included."""
    shards: list[ShardLateness] = []
    merged: dict[datetime, list[LatenessMinute]] = {}
    for shard in range(ctx.store.shard_count):
        try:
            series = await ctx.store.start_lateness(shard, LatenessParams(minutes=minutes))
        except VakitError as exc:
            shards.append(ShardLateness(shard, [], exc.message))
            continue
        shards.append(ShardLateness(shard, series))
        for m in series:
            merged.setdefault(m.minute, []).append(m)
    cluster = [
        LatenessMinute(
            minute=minute,
            count=sum(m.count for m in ms),
            p50_seconds=max(m.p50_seconds for m in ms),
            p99_seconds=max(m.p99_seconds for m in ms),
            max_seconds=max(m.max_seconds for m in ms),
        )
        for minute, ms in sorted(merged.items())
    ]
    return Lateness(shards, cluster)
