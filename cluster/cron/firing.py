"""A schedule and its firings: the :class:`Schedule` every kind of schedule is,
and the :class:`Fire` it yields.

The base class owns the iteration every caller uses: :meth:`Schedule.next_fire`
(the materializer, after the last instant it stored) and :meth:`Schedule.fires`
(previews, bounded by a count and/or an instant). Each kind only says, in
``_fires_after``, which instants come after a given one: the interval kinds in
:mod:`cluster.cron.intervals`, cron fields read on a wall clock in
:mod:`cluster.cron.wall_clock`. Pure: no clock, no I/O.
"""

from __future__ import annotations

import zoneinfo
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Literal

from cluster.instants import utc

__all__ = ["Fire", "Schedule", "ScheduleKind"]

ScheduleKind = Literal["CRON", "FIXED_RATE", "FIXED_DELAY"]


@dataclass(frozen=True)
class Fire:
    """One firing: when (UTC), what the wall clock says there, and why if unusual."""

    scheduled_for: datetime
    """Aware, UTC."""
    local: datetime
    """Aware, in the schedule's zone, with the offset in force at that instant."""
    note: str | None = None
    """Set when DST or a calendar moved or thinned the firing; None normally."""
    moved_to: datetime | None = None
    """Aware, UTC: when a calendar moved the run (``calendarPolicy``
    NEXT_BUSINESS_DAY or PREVIOUS_BUSINESS_DAY); None when it runs at
    ``scheduled_for``, which stays the occurrence's identity either way."""

    @property
    def run_at(self) -> datetime:
        """When it runs: ``moved_to``, or ``scheduled_for``."""
        return self.moved_to or self.scheduled_for


class Schedule(ABC):
    """A parsed schedule. Instances are immutable and safe to share between threads."""

    kind: ClassVar[ScheduleKind]
    moves: ClassVar[bool] = False
    """Whether a stored slot may be skipped or moved (a calendar): planning
    then asks :meth:`at` about the slot it starts from."""
    moves_back: bool = False
    """Whether a slot may run before it is due (PREVIOUS_BUSINESS_DAY):
    planning then goes on to a :meth:`settled` slot."""
    expression: str
    """As given, without surrounding whitespace."""
    time_zone: str
    """The IANA zone name; cron fields are read in it, ``Fire.local`` is shown in it."""

    def __init__(self, expression: str, time_zone: str, zone: zoneinfo.ZoneInfo) -> None:
        self.expression = expression
        self.time_zone = time_zone
        self._zone = zone

    def settled(self, fire: Fire) -> bool:
        """Whether no later slot runs before ``fire``'s slot, so planning may
        stop there: always, unless a calendar moves slots back
        (:class:`~cluster.cron.calendar_schedule.CalendarSchedule`)."""
        return True

    def next_fire(self, after: datetime) -> Fire | None:
        """The first firing strictly after ``after`` (aware, any zone).

        None only when the calendar runs out (year 9999).
        """
        return next(self._fires_after(utc(after)), None)

    def at(self, slot: datetime) -> Fire | None:
        """The firing of a slot this schedule yielded before (what
        ``next_fire_at`` holds); None when it no longer fires."""
        return self._fire(utc(slot))

    def fires(
        self, after: datetime, *, count: int | None = None, until: datetime | None = None
    ) -> Iterator[Fire]:
        """Firings strictly after ``after``, strictly increasing.

        Stops after ``count`` firings and/or at the last one ``<= until``; with
        neither it goes on for as long as the caller iterates.
        """
        after_utc = utc(after)
        until_utc = None if until is None else utc(until)
        if count is not None and count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        return self._bounded(self._fires_after(after_utc), count, until_utc)

    @staticmethod
    def _bounded(
        fires: Iterator[Fire], count: int | None, until: datetime | None
    ) -> Iterator[Fire]:
        if count == 0:
            return
        for n, fire in enumerate(fires, start=1):
            if until is not None and fire.scheduled_for > until:
                return
            yield fire
            if count is not None and n >= count:
                return

    def _fire(self, instant: datetime, note: str | None = None) -> Fire:
        return Fire(instant, instant.astimezone(self._zone), note)

    @abstractmethod
    def _fires_after(self, after: datetime) -> Iterator[Fire]:
        """Every firing strictly after ``after`` (UTC), in order."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.expression!r}, {self.time_zone!r})"
