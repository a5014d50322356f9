"""Interval schedules: ``every 15m`` (fixed rate) and ``every 15m fixed-delay``.

* ``FIXED_RATE`` fires at ``anchor + k * period``, so it never drifts.
* ``FIXED_DELAY`` fires one delay after the previous run finished; ``after``
  is that finish time.

Neither has a wall clock: the time zone only names the zone ``Fire.local`` is
shown in. Pure: no clock, no I/O.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import ClassVar

from cluster.cron.firing import Fire, Schedule, ScheduleKind

__all__ = ["FixedDelaySchedule", "FixedRateSchedule"]


class FixedRateSchedule(Schedule):
    """``every <period>``: fires at ``anchor + k * period`` for integer k."""

    kind: ClassVar[ScheduleKind] = "FIXED_RATE"

    def __init__(
        self,
        expression: str,
        time_zone: str,
        zone: zoneinfo.ZoneInfo,
        period: timedelta,
        anchor: datetime,
    ) -> None:
        super().__init__(expression, time_zone, zone)
        self.period = period
        self.anchor = anchor

    def _fires_after(self, after: datetime) -> Iterator[Fire]:
        # Computed from the anchor rather than from the previous firing, so a late
        # run or a restart never shifts the grid.
        k = (after - self.anchor) // self.period + 1
        try:
            while True:
                yield self._fire(self.anchor + k * self.period)
                k += 1
        except OverflowError:
            return


class FixedDelaySchedule(Schedule):
    """``every <delay> fixed-delay``: the next run starts ``delay`` after the last ended.

    ``next_fire(after=last_finish)`` is ``last_finish + delay``; :meth:`fires` is only
    a preview that assumes every run takes no time.
    """

    kind: ClassVar[ScheduleKind] = "FIXED_DELAY"

    def __init__(
        self, expression: str, time_zone: str, zone: zoneinfo.ZoneInfo, delay: timedelta
    ) -> None:
        super().__init__(expression, time_zone, zone)
        self.delay = delay

    def _fires_after(self, after: datetime) -> Iterator[Fire]:
        instant = after
        try:
            while True:
                instant += self.delay
                yield self._fire(instant)
        except OverflowError:
            return
