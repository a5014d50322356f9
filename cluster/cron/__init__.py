"""Schedule math, pure: the cron grammar, DST and intervals, the materializer's plan.

Nothing here does I/O; the leader loop that writes occurrences is
:mod:`cluster.leader.materializer`.

:func:`parse_schedule` is the public face for a program outside
``cluster`` (the benchmarks): the same parsing and next-fire math the
materializer uses, so a caller asks when a schedule fires instead of
computing it a second way.
"""

from __future__ import annotations

from cluster.cron.schedule import parse_schedule

__all__ = ["parse_schedule"]
