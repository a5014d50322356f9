"""Cron fields on a wall clock: which instants a ``CRON`` schedule fires at.

Five fields (minute hour day-of-month month day-of-week) or a macro
(``@daily`` ...), parsed by :mod:`cluster.cron.expression`, are read in an
IANA time zone at each firing. This module holds the rules that turn a
matching day and slot into instants, and the notes a preview shows when a
rule moved or thinned a firing. Pure: no clock, no I/O.

Daylight saving time follows Vixie cron and cronie (DESIGN.md, "Time"). A cron
schedule is *wildcard* when its minute or hour field starts with ``*``, otherwise
*fixed-time*:

* gap (local times that never happen): a fixed-time slot in the gap fires once, at
  the first instant after the gap; a wildcard schedule has no slots there.
* overlap (local times that happen twice): a fixed-time slot fires only at the
  first occurrence; a wildcard schedule fires at each real occurrence.

That is the default DST policy, ``CRONIE``. A cron may choose another one for
its fixed-time slots: ``SKIP`` (a slot in a gap does not fire that day) or
``BOTH`` (a slot in an overlap fires at both occurrences). Wildcard schedules
already skip gaps and fire twice in overlaps, whatever the policy.

Days 29 to 31 do not exist in every month. The default month-end policy,
``SKIP``, fires only on days that exist (``0 2 31 * *`` runs seven times a
year, like cron); ``CLAMP`` fires on the month's last day instead, once.

croniter is not used for firing: it fires fixed-time schedules twice in an
overlap.
"""

from __future__ import annotations

import bisect
import calendar
import dataclasses
import heapq
import itertools
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import ClassVar, Literal

from cluster.cron.day_forms import BusinessDay, month_days_for
from cluster.cron.expression import CronFields, slot_seconds
from cluster.cron.firing import Fire, Schedule, ScheduleKind

__all__ = [
    "DST_POLICIES",
    "MONTH_END_POLICIES",
    "CronSchedule",
    "DstPolicy",
    "MonthEndPolicy",
]

MonthEndPolicy = Literal["SKIP", "CLAMP"]
DstPolicy = Literal["CRONIE", "SKIP", "BOTH"]
MONTH_END_POLICIES: tuple[MonthEndPolicy, ...] = ("SKIP", "CLAMP")
DST_POLICIES: tuple[DstPolicy, ...] = ("CRONIE", "SKIP", "BOTH")

_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)
# The Gregorian calendar (leap years, weekdays) repeats every 400 years, so a
# valid expression matches a day in any 400-year window; this bounds every search.
_SEARCH_YEARS = 400
# Stop before datetime.max so that adding a UTC offset can never overflow.
_LAST_DAY = date(9999, 12, 29)


@dataclass(frozen=True)
class _Candidate:
    """One instant a slot maps to, before equal instants are merged."""

    instant: datetime
    gap_wall: str | None = None  # "02:30" when the slot did not exist that day
    note: str | None = None
    dropped: bool = False  # dstPolicy SKIP: a note only, never a firing


class CronSchedule(Schedule):
    """Five cron fields read in an IANA zone, with the Vixie cron DST rule."""

    kind: ClassVar[ScheduleKind] = "CRON"

    def __init__(
        self,
        expression: str,
        time_zone: str,
        zone: zoneinfo.ZoneInfo,
        fields: CronFields,
        *,
        month_end: MonthEndPolicy = "SKIP",
        dst: DstPolicy = "CRONIE",
        business_day: BusinessDay | None = None,
    ) -> None:
        super().__init__(expression, time_zone, zone)
        self._fields = fields
        # nBD and LBD read it (a calendar's rule); Monday-Friday when None.
        self._business_day = business_day
        self._months = sorted(fields.months)
        self._slot_seconds = slot_seconds(fields)
        self.month_end: MonthEndPolicy = month_end
        self.dst: DstPolicy = dst
        # Clamping only matters for a restricted day field that names a day
        # some month lacks (29, 30 or 31).
        self._clamp_from = (
            max(fields.days) if month_end == "CLAMP" and not fields.dom_star and fields.days else 0
        )

    @property
    def wildcard(self) -> bool:
        """True when the minute or hour field starts with ``*`` (see the module doc)."""
        return self._fields.wildcard

    def _fires_after(self, after: datetime) -> Iterator[Fire]:
        # Slots come in wall-clock order, but around an overlap their instants do
        # not (a wildcard's second 01:00 comes after the first 01:15). Each slot
        # carries a floor that no later slot can map below, so the heap releases
        # an instant once nothing earlier can still arrive.
        heap: list[tuple[datetime, int, _Candidate]] = []
        order = itertools.count()
        last = after
        # A slot that dstPolicy SKIP dropped fires nothing; what it says goes
        # on the next firing, so the preview shows the policy at work.
        dropped: str | None = None

        def release() -> Iterator[Fire]:
            nonlocal last, dropped
            fire, skipped = self._pop_merged(heap)
            if fire.scheduled_for <= last:
                return
            if fire is skipped:
                dropped = fire.note
                return
            if dropped is not None:
                note = dropped if fire.note is None else f"{fire.note}; {dropped}"
                fire, dropped = Fire(fire.scheduled_for, fire.local, note), None
            last = fire.scheduled_for
            yield fire

        for candidates, floor in self._slots(after):
            for candidate in candidates:
                heapq.heappush(heap, (candidate.instant, next(order), candidate))
            while heap and heap[0][0] < floor:
                yield from release()
        while heap:
            yield from release()

    def _pop_merged(self, heap: list[tuple[datetime, int, _Candidate]]) -> tuple[Fire, Fire | None]:
        """The next instant, its candidates merged, and itself again when
        only dropped slots (dstPolicy SKIP) were there: it does not fire."""
        # Several slots can land on one instant (02:00 and 02:30 both moved to the
        # end of a gap, plus a real 03:00 slot): they fire once.
        instant, _, first = heapq.heappop(heap)
        merged = [first]
        while heap and heap[0][0] == instant:
            merged.append(heapq.heappop(heap)[2])
        local = instant.astimezone(self._zone)
        dropped = sorted({c.gap_wall for c in merged if c.dropped and c.gap_wall is not None})
        real = [c for c in merged if not c.dropped]
        dropped_note = (
            f"DST gap on {local:%Y-%m-%d}: {', '.join(dropped)} did not exist; "
            "not fired (dstPolicy SKIP)"
            if dropped
            else None
        )
        if not real:
            fire = Fire(instant, local, dropped_note)
            return fire, fire
        gap_walls = [c.gap_wall for c in real if c.gap_wall is not None]
        if gap_walls:
            note: str | None = _gap_note(gap_walls, local)
        else:
            note = next((c.note for c in real if c.note is not None), None)
        if dropped_note is not None:
            note = dropped_note if note is None else f"{note}; {dropped_note}"
        return Fire(instant, local, note), None

    def _slots(self, after: datetime) -> Iterator[tuple[list[_Candidate], datetime]]:
        """(instants of one slot, floor of all later slots), slot by slot in wall order."""
        try:
            # Two days of margin: a slot of an earlier local date can land after
            # `after` when a transition moves the clock back across midnight.
            start = after.astimezone(self._zone).date() - 2 * _DAY
        except OverflowError:
            return
        seconds = self._slot_seconds
        for day, clamp_note in self._days(start):
            midnight = datetime.combine(day, time())
            offset = self._steady_offset(midnight)
            if offset is not None:
                # Fast path for the 363-odd days a year without a transition:
                # one subtraction per slot, and slots up to `after` skipped.
                base = (midnight - offset).replace(tzinfo=UTC)
                first = bisect.bisect_right(seconds, (after - base).total_seconds())
                for second in seconds[first:]:
                    instant = base + timedelta(seconds=second)
                    yield [_Candidate(instant, note=clamp_note)], instant + _MINUTE
            else:
                for second in seconds:
                    wall = midnight + timedelta(seconds=second)
                    candidates = self._resolve(wall)
                    if clamp_note is not None:
                        candidates = [
                            c if c.note else dataclasses.replace(c, note=clamp_note)
                            for c in candidates
                        ]
                    yield candidates, self._earliest(wall + _MINUTE)

    def _days(self, start: date) -> Iterator[tuple[date, str | None]]:
        """Local dates from ``start`` on whose day and month match, in order,
        each with a note when only the month-end clamp made it match."""
        f = self._fields
        clamp_from = self._clamp_from
        forms = f.forms
        has_forms = forms.dom or forms.dow
        form_dom: frozenset[int] = frozenset()
        form_dow: frozenset[int] = frozenset()
        form_notes: dict[int, str] = {}
        year = start.year
        last_match_year = year
        while year <= _LAST_DAY.year and year - last_match_year <= _SEARCH_YEARS:
            for month in self._months:
                if (year, month) < (start.year, start.month):
                    continue
                n_days = calendar.monthrange(year, month)[1]
                first_weekday = (calendar.weekday(year, month, 1) + 1) % 7  # Sunday = 0
                if has_forms:
                    # L, L-n, nW, LW, x#n, xL: found once a month, not per day.
                    form_dom, form_dow, form_notes = month_days_for(
                        forms,
                        year,
                        month,
                        clamp=self.month_end == "CLAMP",
                        business_day=self._business_day,
                    )
                for day in range(1, n_days + 1):
                    dom = day in f.days or day in form_dom
                    dow = (first_weekday + day - 1) % 7 in f.weekdays or day in form_dow
                    matched = (dom and dow) if (f.dom_star or f.dow_star) else (dom or dow)
                    note = form_notes.get(day) if has_forms and day not in f.days else None
                    if not matched and day == n_days and clamp_from > n_days:
                        # CLAMP: the 29th-31st a month lacks fire on its last day.
                        matched = dow if f.dow_star else True
                        note = _clamp_note(
                            sorted(d for d in f.days if d > n_days), year, month, day
                        )
                    if matched:
                        found = date(year, month, day)
                        if found > _LAST_DAY:
                            return
                        if found >= start:
                            last_match_year = year
                            yield found, note
            year += 1

    def _utc(self, wall: datetime, fold: int) -> datetime:
        return wall.replace(tzinfo=self._zone, fold=fold).astimezone(UTC)

    def _wall(self, instant: datetime) -> datetime:
        return instant.astimezone(self._zone).replace(tzinfo=None)

    def _steady_offset(self, midnight: datetime) -> timedelta | None:
        """The UTC offset of a day without a transition, None for a transition day."""
        start = self._utc(midnight, 0)
        end = self._utc(midnight + _DAY, 0)
        # A midnight that is ambiguous or missing differs between folds; a day of
        # other than 24 hours contains a transition. (Two transitions cancelling
        # out within one day do not occur in the tz database.)
        if (
            start != self._utc(midnight, 1)
            or end != self._utc(midnight + _DAY, 1)
            or end - start != _DAY
        ):
            return None
        return midnight - start.replace(tzinfo=None)

    def _earliest(self, wall: datetime) -> datetime:
        """The first instant whose wall clock reads ``wall`` or later.

        Monotonic in ``wall``, and no instant of a slot at or after ``wall`` is
        earlier: this is the floor that orders the heap in :meth:`_fires_after`.
        """
        instant = self._utc(wall, 0)
        if self._wall(instant) == wall:
            return instant
        return self._gap_end(wall)

    def _gap_end(self, wall: datetime) -> datetime:
        """The first instant after the gap that swallows ``wall``."""
        # In a gap zoneinfo reads fold=0 with the old offset and fold=1 with the
        # new one, so the two instants bracket the transition. Bisecting on them
        # finds it whatever the shift (an hour, 30 minutes on Lord Howe, a day in
        # Samoa in 2011); transitions fall on whole seconds.
        low, high = sorted((self._utc(wall, 0), self._utc(wall, 1)))
        after_offset = high.astimezone(self._zone).utcoffset()
        while high - low > timedelta(seconds=1):
            mid = low + timedelta(seconds=int((high - low).total_seconds()) // 2)
            if mid.astimezone(self._zone).utcoffset() == after_offset:
                high = mid
            else:
                low = mid
        return high

    def _resolve(self, wall: datetime) -> list[_Candidate]:
        """The instants of one slot on a transition day, by the DST rule."""
        first = self._utc(wall, 0)
        if self._wall(first) != wall:
            if self._fields.wildcard:
                return []
            gap_end = self._gap_end(wall)
            return [_Candidate(gap_end, gap_wall=f"{wall:%H:%M}", dropped=self.dst == "SKIP")]
        second = self._utc(wall, 1)
        if second == first or self._wall(second) != wall:
            return [_Candidate(first)]
        clock = f"{wall:%H:%M}"
        first_name = _zone_name(first.astimezone(self._zone))
        second_name = _zone_name(second.astimezone(self._zone))
        if self._fields.wildcard or self.dst == "BOTH":
            return [
                _Candidate(
                    first,
                    note=f"DST overlap: first {clock} ({first_name}); "
                    f"it repeats at {clock} ({second_name})",
                ),
                _Candidate(second, note=f"DST overlap: repeated {clock} ({second_name})"),
            ]
        return [
            _Candidate(
                first,
                note=f"DST overlap: fires only at the first {clock} ({first_name}); "
                f"the repeated {clock} ({second_name}) is skipped",
            )
        ]


def _clamp_note(missing: list[int], year: int, month: int, last: int) -> str:
    days = ", ".join(_ordinal(d) for d in missing)
    return (
        f"month end: {calendar.month_name[month]} {year} has no {days}; "
        f"fired on the {_ordinal(last)} (monthEndPolicy CLAMP)"
    )


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _zone_name(local: datetime) -> str:
    name = local.tzname() or ""
    # Zones without an abbreviation report their offset ("+11"); say it once.
    if not name or name[0] in "+-":
        offset = local.utcoffset() or timedelta(0)
        return f"UTC{_format_offset(offset)}"
    return name


def _format_offset(offset: timedelta) -> str:
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(int(offset.total_seconds())) // 60
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def _gap_note(walls: list[str], local: datetime) -> str:
    walls = sorted(set(walls))
    if len(walls) == 1:
        missing = f"{walls[0]} does"
    elif len(walls) <= 3:
        missing = f"{', '.join(walls[:-1])} and {walls[-1]} do"
    else:
        missing = f"{walls[0]} to {walls[-1]} ({len(walls)} slots) do"
    once = " once" if len(walls) > 1 else ""
    return f"DST gap: {missing} not exist; fired{once} at {local:%H:%M} {_zone_name(local)}"
