"""The worker's clock anchor never runs ahead of the shards: a reading of a
shard's ``now()`` is anchored at the end of its round trip, so a reading
that waited (for a pool connection, a stalled shard) leaves the clock a
little behind, never ahead, and no job is fired before its ``runAt`` for it.
The fault campaign (benchmarks/campaign) saw firings 254 ms early when the
reading was anchored halfway through a slow round trip."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import cast

from cluster.clock import AnchoredClock
from cluster.processes import anchor_clock
from cluster.store import PgCronStore

# The shards' clock in this test: an epoch that the monotonic clock advances.
EPOCH = 1_800_000_000.0


def shard_time() -> float:
    return EPOCH + time.monotonic()


class SlowShard:
    """Answers ``now()`` as read at the end of a wait (the query waited for
    a connection, then ran), then takes a short way back."""

    def __init__(self, wait: float) -> None:
        self.wait = wait

    async def database_now(self, shard: int) -> datetime:
        await asyncio.sleep(self.wait)
        reading = datetime.fromtimestamp(shard_time(), UTC)
        await asyncio.sleep(0.01)
        return reading


async def test_a_slow_reading_leaves_the_clock_behind_never_ahead() -> None:
    clock = AnchoredClock()
    assert await anchor_clock(clock, cast(PgCronStore, SlowShard(0.3)), 1)
    ahead = clock.timestamp() - shard_time()
    assert ahead <= 0.0, f"the clock runs {ahead * 1000:.0f} ms ahead of the shards"
    assert ahead > -0.1, f"the clock runs {-ahead * 1000:.0f} ms behind: more than the way back"
