"""The worker's clock: the shards' time carried by the monotonic clock."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from cluster.clock import AnchoredClock


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
