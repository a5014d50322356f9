"""The minutely benchmark's per-slot figures come from Outcomes.scheduled_in;
its creation can be timed to a second of the minute."""

from __future__ import annotations

from datetime import UTC, datetime

from benchmarks.minutely import seconds_until_second
from benchmarks.outcomes import Outcomes


def test_scheduled_in_keeps_the_jobs_of_those_instants_only() -> None:
    out = Outcomes(
        scheduled=[60.0, 120.0, 60.0, 180.0],
        started=[60.5, 121.0, None, 180.2],
        finished=[61.0, 122.0, 70.0, 181.0],
        attempts=[1, 1, 3, 1],
        created=[1.0, 2.0, 3.0, 4.0],
    )
    slot = out.scheduled_in({60.0})
    assert slot.scheduled == [60.0, 60.0]
    assert slot.attempts == [1, 3]
    assert slot.created == [1.0, 3.0]
    assert slot.finished_count == 2
    assert slot.lateness() == [0.5]  # the job that never started has no lateness
    both = out.scheduled_in({60.0, 180.0})
    assert both.finished == [61.0, 70.0, 181.0]
    assert out.scheduled_in(set()).finished_count == 0


def test_the_minutely_creation_waits_for_its_second_of_the_minute() -> None:
    at = datetime(2026, 12, 2, 6, 31, 50, 250_000, tzinfo=UTC)
    assert seconds_until_second(at, 56) == 5.75
    assert seconds_until_second(at, 10) == 19.75  # next minute's
    assert seconds_until_second(at.replace(second=56, microsecond=0), 56) == 60.0
