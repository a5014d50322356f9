"""The worker's clock: the shards' time carried by the monotonic clock."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from cluster.clock import AnchoredClock
from cluster.processes import anchor_clock


def test_an_anchored_clock_tells_the_shards_time_not_the_hosts() -> None:
    clock = AnchoredClock()
    host = datetime.now(UTC)
    assert abs((clock.now() - host).total_seconds()) < 60  # the system clock until anchored
    # The shards are two hours ahead of this host (its wall clock stepped
    # back); their now() was read five monotonic seconds ago.
    shards = host + timedelta(hours=2)
    clock.anchor(shards, time.monotonic() - 5)
    now = clock.now()
    assert shards + timedelta(seconds=5) <= now < shards + timedelta(minutes=1)
    assert clock.offset_seconds() == pytest.approx(7205, abs=60)
    # Time goes on by the monotonic clock, never backwards.
    assert clock.now() >= now


def test_an_anchor_must_be_aware() -> None:
    with pytest.raises(ValueError, match="naive"):
        AnchoredClock().anchor(datetime.now(), time.monotonic())


class _LateReading:
    """A shard whose clock is this host's monotonic clock plus ``base``, and
    whose now() is read late in the round trip (a statement that queued
    before it started: PostgreSQL's now() is when it starts)."""

    def __init__(self, base: float) -> None:
        self.base = base

    async def database_now(self, shard: int) -> datetime:
        await asyncio.sleep(0.05)
        read = datetime.fromtimestamp(self.base + time.monotonic(), UTC)
        await asyncio.sleep(0.005)
        return read


async def test_an_anchor_never_puts_the_clock_ahead_of_the_shard() -> None:
    # A firing is never before run_at by the shard's clock: the anchor's
    # error (where in the round trip the reading was) is taken on the late
    # side. At the midpoint this clock would be ~22 ms ahead.
    shard = _LateReading(base=1_000_000.0)
    clock = AnchoredClock()
    assert await anchor_clock(clock, shard, 1)  # type: ignore[arg-type]
    for _ in range(3):
        ahead = clock.timestamp() - (shard.base + time.monotonic())
        assert ahead <= 0, f"the clock is {ahead * 1000:.1f} ms ahead of the shard"
        assert ahead > -0.5  # behind by the round trip at most (a slow machine's)
        await asyncio.sleep(0.01)
