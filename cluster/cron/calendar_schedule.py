"""A schedule that follows a calendar: its slots on days the calendar does not
work are skipped or moved (``calendarPolicy``). Pure.

The slots are the inner schedule's (cron fields, DST and month-end policies
unchanged). A slot's day is its date in the calendar's time zone; on a day
that is not a business day (:meth:`~cluster.model.CalendarBody.is_business_day`):

* ``SKIP``: the slot does not fire; the next firing carries a note saying
  which slot, which calendar and which day;
* ``NEXT_BUSINESS_DAY`` / ``PREVIOUS_BUSINESS_DAY``: it fires on the next (or
  previous) business day at the same wall time in the cron's zone
  (:attr:`~cluster.cron.firing.Fire.moved_to`), with a note. Its
  ``scheduled_for`` stays the slot: the occurrence's identity, one per
  (cron_id, scheduledFor), is the nominal slot whatever the move.

A move goes at most :data:`~cluster.cron.calendar_rules.MAX_MOVE_DAYS`
days; beyond it (a calendar that excludes a whole month) the slot is skipped
and noted. A wall time the target day lacks (a DST gap) runs at the first
instant after the gap, and one it has twice at the first, as cronie does.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from typing import ClassVar, Literal

from cluster.cron.calendar_rules import MAX_MOVE_DAYS, next_business_day, previous_business_day
from cluster.cron.firing import Fire, Schedule, ScheduleKind
from cluster.model import CalendarBody

__all__ = ["CalendarPolicy", "CalendarSchedule"]

CalendarPolicy = Literal["SKIP", "NEXT_BUSINESS_DAY", "PREVIOUS_BUSINESS_DAY"]
# A calendar that never works (every day excluded, up to its last date) makes
# a SKIP schedule silent; the search for a firing gives up after this long.
_SEARCH = timedelta(days=4 * 366)


class CalendarSchedule(Schedule):
    """``inner``'s slots, each kept, skipped or moved by ``calendar``."""

    moves: ClassVar[bool] = True

    def __init__(
        self,
        inner: Schedule,
        calendar: CalendarBody,
        policy: CalendarPolicy,
        *,
        name: str,
        version: int,
    ) -> None:
        super().__init__(inner.expression, inner.time_zone, zoneinfo.ZoneInfo(inner.time_zone))
        self.inner = inner
        self.calendar = calendar
        self.policy: CalendarPolicy = policy
        self.moves_back = policy == "PREVIOUS_BUSINESS_DAY"
        self.calendar_name = name
        self.calendar_version = version
        self._calendar_zone = zoneinfo.ZoneInfo(calendar.time_zone)

    @property
    def kind(self) -> ScheduleKind:  # type: ignore[override]
        return self.inner.kind

    def at(self, slot: datetime) -> Fire | None:
        fire = self.inner.at(slot)
        if fire is None:
            return None
        decided, _ = self._decide(fire)
        return decided

    def settled(self, fire: Fire) -> bool:
        """PREVIOUS_BUSINESS_DAY moves a slot back, up to
        :data:`~cluster.cron.calendar_rules.MAX_MOVE_DAYS` days: planning
        that stopped before any slot could meet a later one whose run is
        already past. It stops before a slot that runs where it stands on a
        business day D, and that no later slot runs before. Only the slots up
        to the next business day B can: a slot after B runs on B or later
        (B is a business day between), so the check reads the slots up to
        the end of B, a day more for the cron's zone against the calendar's."""
        if not self.moves_back:
            return True
        if fire.moved_to is not None:
            return False
        day = fire.scheduled_for.astimezone(self._calendar_zone).date()
        business = next_business_day(self.calendar, day)
        if business is None:
            return False
        edge = datetime.combine(business + timedelta(days=2), time(), self._calendar_zone)
        for later in self.fires(fire.scheduled_for, until=edge):
            if later.run_at < fire.scheduled_for:
                return False
        return True

    def _fires_after(self, after: datetime) -> Iterator[Fire]:
        skipped: list[str] = []
        since: datetime | None = None  # the first slot of the current run of skips
        for fire in self.inner.fires(after):
            decided, why = self._decide(fire)
            if decided is None:
                skipped.append(why)
                since = since or fire.scheduled_for
                if fire.scheduled_for - since > _SEARCH:
                    return
                continue
            since = None
            if skipped:
                # What SKIP dropped goes on the next firing, as dstPolicy
                # SKIP's notes do: the preview shows the policy at work.
                shown = "; ".join(skipped[:5]) + ("; ..." if len(skipped) > 5 else "")
                note = shown if decided.note is None else f"{decided.note}; {shown}"
                decided = Fire(decided.scheduled_for, decided.local, note, decided.moved_to)
                skipped = []
            yield decided

    def _decide(self, fire: Fire) -> tuple[Fire | None, str]:
        """The fire as the calendar leaves it (None: skipped), and why."""
        day = fire.scheduled_for.astimezone(self._calendar_zone).date()
        if self.calendar.is_business_day(day):
            return fire, ""
        reason = self._reason(day)
        slot = f"{fire.local:%Y-%m-%d %H:%M}"
        if self.policy == "SKIP":
            return None, f"{slot} skipped: {reason} (calendarPolicy SKIP)"
        mover = next_business_day if self.policy == "NEXT_BUSINESS_DAY" else previous_business_day
        target = mover(self.calendar, day)
        if target is None:
            return None, (
                f"{slot} skipped: {reason}, and no business day within {MAX_MOVE_DAYS} days "
                f"({self.policy})"
            )
        moved = _same_wall_on(fire.local, (target - day).days, self._zone)
        note = (
            f"{slot} moved to {moved.astimezone(self._zone):%Y-%m-%d %H:%M}: {reason} "
            f"(calendarPolicy {self.policy})"
        )
        if fire.note is not None:
            note = f"{fire.note}; {note}"
        return Fire(fire.scheduled_for, fire.local, note, moved), ""

    def _reason(self, day: date) -> str:
        kind = (
            "an excluded day" if day in self.calendar.exclude_dates else "not in its business week"
        )
        return (
            f"{day:%a} {day.isoformat()} is {kind} of calendar {self.calendar_name!r} "
            f"(version {self.calendar_version})"
        )


def _same_wall_on(local: datetime, days: int, zone: zoneinfo.ZoneInfo) -> datetime:
    """The instant whose wall clock in ``zone`` reads ``local``'s, ``days`` later (UTC)."""
    wall = local.replace(tzinfo=None) + timedelta(days=days)
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first  # an overlap's first occurrence, or a plain wall time
    # A gap: the first instant after it. The folds bracket the transition;
    # transitions fall on whole minutes in the tz database.
    instant = min(first, wall.replace(tzinfo=zone, fold=1).astimezone(UTC))
    while instant.astimezone(zone).replace(tzinfo=None) < wall:
        instant += timedelta(minutes=1)
    return instant
