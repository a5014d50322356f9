"""Schedule math for cron jobs: read an expression, list the instants it fires at.

Pure functions of (expression, time zone, instant): no clock, no I/O, no database.
The materializer asks :meth:`Schedule.next_fire` for the next instant after the
last one it stored; the API calls :func:`parse_schedule` to validate what users
send and shows them :meth:`Schedule.fires` as a preview.

Three kinds of schedule:

* ``CRON``: five fields (minute hour day-of-month month day-of-week) or a macro
  (``@daily`` ...), read in an IANA time zone at each firing.
* ``FIXED_RATE``: ``every 15m`` fires at ``anchor + k * period``, so it never drifts.
* ``FIXED_DELAY``: ``every 15m fixed-delay`` fires one delay after the previous
  run finished; ``after`` is that finish time.

Daylight saving time follows Vixie cron and cronie (DESIGN.md, "Time"). A cron
schedule is *wildcard* when its minute or hour field starts with ``*``, otherwise
*fixed-time*:

* gap (local times that never happen): a fixed-time slot in the gap fires once, at
  the first instant after the gap; a wildcard schedule has no slots there.
* overlap (local times that happen twice): a fixed-time slot fires only at the
  first occurrence; a wildcard schedule fires at each real occurrence.

croniter is not used for firing: it fires fixed-time schedules twice in an
overlap. Fields are parsed here too, so that hostile input is refused by a small,
linear grammar with messages a person can act on.
"""

from __future__ import annotations

import bisect
import calendar
import hashlib
import heapq
import itertools
import re
import zoneinfo
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import ClassVar, Literal

from cluster.clock import utc
from cluster.errors import InvalidRequest

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "CronSchedule",
    "Fire",
    "FixedDelaySchedule",
    "FixedRateSchedule",
    "InvalidSchedule",
    "Schedule",
    "ScheduleKind",
    "is_wildcard",
    "parse_schedule",
    "stable_jitter",
]

ScheduleKind = Literal["CRON", "FIXED_RATE", "FIXED_DELAY"]

MAX_EXPRESSION_LENGTH = 200
# No interval schedule may be shorter than this, whatever min_interval says: the
# materializer works at minute resolution.
MIN_INTERVAL = timedelta(minutes=1)
MAX_INTERVAL = timedelta(days=365)
# A field never has more distinct values than this (minutes); longer lists are
# either repetitive or hostile.
MAX_LIST_ITEMS = 60

_DEFAULT_ANCHOR = datetime(1970, 1, 1, tzinfo=UTC)
_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)
# The Gregorian calendar (leap years, weekdays) repeats every 400 years, so a
# valid expression matches a day in any 400-year window; this bounds every search.
_SEARCH_YEARS = 400
# Stop before datetime.max so that adding a UTC offset can never overflow.
_LAST_DAY = date(9999, 12, 29)

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = {name.upper(): i for i, name in enumerate(calendar.month_abbr) if name}
_DOW_NAMES = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}
_MONTH_TITLES = {i: calendar.month_name[i] for i in range(1, 13)}
# Longest each month can be: February has 29 days in leap years.
_MAX_MONTH_DAYS = {m: calendar.monthrange(2000, m)[1] for m in range(1, 13)}


class InvalidSchedule(InvalidRequest, ValueError):
    """An expression, interval or time zone that cannot be scheduled.

    The message says what is wrong and, where it can, what to write instead. It is
    an :class:`InvalidRequest` (the API answers 422) and a ``ValueError``.
    """


@dataclass(frozen=True)
class Fire:
    """One firing: when (UTC), what the wall clock says there, and why if unusual."""

    scheduled_for: datetime
    """Aware, UTC."""
    local: datetime
    """Aware, in the schedule's zone, with the offset in force at that instant."""
    note: str | None = None
    """Set when DST moved or thinned the firing; None normally."""


class Schedule(ABC):
    """A parsed schedule. Instances are immutable and safe to share between threads."""

    kind: ClassVar[ScheduleKind]
    expression: str
    """As given, without surrounding whitespace."""
    time_zone: str
    """The IANA zone name; cron fields are read in it, ``Fire.local`` is shown in it."""

    def __init__(self, expression: str, time_zone: str, zone: zoneinfo.ZoneInfo) -> None:
        self.expression = expression
        self.time_zone = time_zone
        self._zone = zone

    def next_fire(self, after: datetime) -> Fire | None:
        """The first firing strictly after ``after`` (aware, any zone).

        None only when the calendar runs out (year 9999).
        """
        return next(self._fires_after(utc(after)), None)

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


@dataclass(frozen=True)
class _CronFields:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    last_day: bool
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    # Vixie cron: a day field whose text starts with "*" is "unrestricted"; when
    # either day field is, a day must match both, otherwise either one suffices.
    dom_star: bool
    dow_star: bool
    wildcard: bool


@dataclass(frozen=True)
class _Candidate:
    """One instant a slot maps to, before equal instants are merged."""

    instant: datetime
    gap_wall: str | None = None  # "02:30" when the slot did not exist that day
    note: str | None = None


class CronSchedule(Schedule):
    """Five cron fields read in an IANA zone, with the Vixie cron DST rule."""

    kind: ClassVar[ScheduleKind] = "CRON"

    def __init__(
        self, expression: str, time_zone: str, zone: zoneinfo.ZoneInfo, fields: _CronFields
    ) -> None:
        super().__init__(expression, time_zone, zone)
        self._fields = fields
        self._months = sorted(fields.months)
        self._slot_seconds = _slot_seconds(fields)

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
        for candidates, floor in self._slots(after):
            for candidate in candidates:
                heapq.heappush(heap, (candidate.instant, next(order), candidate))
            while heap and heap[0][0] < floor:
                fire = self._pop_merged(heap)
                if fire.scheduled_for > last:
                    last = fire.scheduled_for
                    yield fire
        while heap:
            fire = self._pop_merged(heap)
            if fire.scheduled_for > last:
                last = fire.scheduled_for
                yield fire

    def _pop_merged(self, heap: list[tuple[datetime, int, _Candidate]]) -> Fire:
        # Several slots can land on one instant (02:00 and 02:30 both moved to the
        # end of a gap, plus a real 03:00 slot): they fire once.
        instant, _, first = heapq.heappop(heap)
        merged = [first]
        while heap and heap[0][0] == instant:
            merged.append(heapq.heappop(heap)[2])
        gap_walls = [c.gap_wall for c in merged if c.gap_wall is not None]
        local = instant.astimezone(self._zone)
        if gap_walls:
            return Fire(instant, local, _gap_note(gap_walls, local))
        note = next((c.note for c in merged if c.note is not None), None)
        return Fire(instant, local, note)

    def _slots(self, after: datetime) -> Iterator[tuple[list[_Candidate], datetime]]:
        """(instants of one slot, floor of all later slots), slot by slot in wall order."""
        try:
            # Two days of margin: a slot of an earlier local date can land after
            # `after` when a transition moves the clock back across midnight.
            start = after.astimezone(self._zone).date() - 2 * _DAY
        except OverflowError:
            return
        seconds = self._slot_seconds
        for day in self._days(start):
            midnight = datetime.combine(day, time())
            offset = self._steady_offset(midnight)
            if offset is not None:
                # Fast path for the 363-odd days a year without a transition:
                # one subtraction per slot, and slots up to `after` skipped.
                base = (midnight - offset).replace(tzinfo=UTC)
                first = bisect.bisect_right(seconds, (after - base).total_seconds())
                for second in seconds[first:]:
                    instant = base + timedelta(seconds=second)
                    yield [_Candidate(instant)], instant + _MINUTE
            else:
                for second in seconds:
                    wall = midnight + timedelta(seconds=second)
                    yield self._resolve(wall), self._earliest(wall + _MINUTE)

    def _days(self, start: date) -> Iterator[date]:
        """Local dates from ``start`` on whose day and month match, in order."""
        f = self._fields
        year = start.year
        last_match_year = year
        while year <= _LAST_DAY.year and year - last_match_year <= _SEARCH_YEARS:
            for month in self._months:
                if (year, month) < (start.year, start.month):
                    continue
                n_days = calendar.monthrange(year, month)[1]
                first_weekday = (calendar.weekday(year, month, 1) + 1) % 7  # Sunday = 0
                for day in range(1, n_days + 1):
                    dom = day in f.days or (f.last_day and day == n_days)
                    dow = (first_weekday + day - 1) % 7 in f.weekdays
                    if (dom and dow) if (f.dom_star or f.dow_star) else (dom or dow):
                        found = date(year, month, day)
                        if found > _LAST_DAY:
                            return
                        if found >= start:
                            last_match_year = year
                            yield found
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
            return [_Candidate(self._gap_end(wall), gap_wall=f"{wall:%H:%M}")]
        second = self._utc(wall, 1)
        if second == first or self._wall(second) != wall:
            return [_Candidate(first)]
        clock = f"{wall:%H:%M}"
        first_name = _zone_name(first.astimezone(self._zone))
        second_name = _zone_name(second.astimezone(self._zone))
        if self._fields.wildcard:
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


def _slot_seconds(fields: _CronFields) -> list[int]:
    return sorted(h * 3600 + m * 60 for h in fields.hours for m in fields.minutes)


# --- parsing -----------------------------------------------------------------


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    star_high: int  # "*" stops here: day-of-week 7 is Sunday again
    hash_low: int
    hash_high: int
    names: dict[str, int]
    names_hint: str = ""


_FIELDS = (
    _FieldSpec("minute", 0, 59, 59, 0, 59, {}),
    _FieldSpec("hour", 0, 23, 23, 0, 23, {}),
    # H picks a day from 1-28, as Jenkins does, so that it fires every month.
    _FieldSpec("day-of-month", 1, 31, 31, 1, 28, {}),
    _FieldSpec("month", 1, 12, 12, 1, 12, _MONTH_NAMES, "1-12 or JAN-DEC"),
    _FieldSpec("day-of-week", 0, 7, 6, 0, 6, _DOW_NAMES, "0-7 or SUN-SAT"),
)

# One item of a comma list. No nested quantifiers, so matching is linear even for
# hostile input (which is also capped at MAX_EXPRESSION_LENGTH characters).
_ITEM = re.compile(
    r"""
    (?:
        (?P<star>\*)
      | (?P<hash>H)(?:\((?P<hlow>[0-9]+|[A-Z]+)-(?P<hhigh>[0-9]+|[A-Z]+)\))?
      | (?P<last>L)
      | (?P<low>[0-9]+|[A-Z]+)(?:-(?P<high>[0-9]+|[A-Z]+))?
    )
    (?:/(?P<step>[0-9]+))?
    """,
    re.VERBOSE,
)
_CRON_CHARS = re.compile(r"[A-Za-z0-9*/,()\- \t]+")
_INTERVAL = re.compile(
    r"every\s+(?P<amount>\S+)(?:\s+(?P<mode>fixed-delay|fixed-rate))?", re.IGNORECASE
)
_DURATION = re.compile(
    r"(?:(?P<d>[0-9]{1,4})d)?(?:(?P<h>[0-9]{1,6})h)?(?:(?P<m>[0-9]{1,8})m)?(?:(?P<s>[0-9]{1,10})s)?",
    re.IGNORECASE,
)
_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*")
# Present in some zone directories but not places: the host's own zone, a
# placeholder, and the file that supplies default DST rules.
_NOT_ZONES = frozenset({"localtime", "Factory", "posixrules"})


def parse_schedule(
    expression: str,
    time_zone: str,
    *,
    seed: str = "",
    min_interval: timedelta = MIN_INTERVAL,
    anchor: datetime | None = None,
) -> Schedule:
    """Validate and parse a schedule; raise :class:`InvalidSchedule` with a usable message.

    ``seed`` (the cron job's id) fixes the values that ``H`` fields pick.
    ``min_interval`` refuses schedules that may fire more often than that.
    ``anchor`` (aware) is where a fixed-rate grid starts; default 1970-01-01 UTC.
    """
    if not isinstance(expression, str):
        raise InvalidSchedule(f"a schedule must be a string, got {type(expression).__name__}")
    # Checked before any other work so that huge input costs nothing.
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise InvalidSchedule(
            f"schedule is {len(expression)} characters long; the limit is {MAX_EXPRESSION_LENGTH}"
        )
    text = expression.strip()
    if not text:
        raise InvalidSchedule("schedule is empty: write e.g. '0 3 * * *' or 'every 15m'")
    if min_interval < timedelta(0):
        raise ValueError(f"min_interval must not be negative, got {min_interval}")
    if text[:5].lower() == "every":
        period, fixed_delay = _parse_interval(text, min_interval)
        zone = _load_zone(time_zone)
        if fixed_delay:
            return FixedDelaySchedule(text, time_zone, zone, period)
        start = _DEFAULT_ANCHOR if anchor is None else utc(anchor)
        return FixedRateSchedule(text, time_zone, zone, period, start)
    fields = _parse_cron(text, seed)
    _check_fires(fields, text)
    _check_frequency(fields, text, min_interval)
    return CronSchedule(text, time_zone, _load_zone(time_zone), fields)


def is_wildcard(expression: str) -> bool:
    """Whether DST treats ``expression`` as wildcard (see the module doc).

    A cron expression is wildcard when its minute or hour field starts with ``*``
    (macros are expanded first: ``@hourly`` is, ``@daily`` is not). Interval
    schedules count real elapsed time, which DST never moves or repeats, as a
    wildcard schedule does: they answer True. Raises :class:`InvalidSchedule` for
    an expression that does not parse.
    """
    # A full parse (zone-independent), so that garbage is refused, not classified.
    schedule = parse_schedule(expression, "UTC", min_interval=timedelta(0))
    return not isinstance(schedule, CronSchedule) or schedule.wildcard


def stable_jitter(seed: str, jitter_seconds: int) -> int:
    """A stable offset in ``[0, jitter_seconds)`` for ``seed`` (0 when jitter is 0).

    SHA-256, not ``hash()``: Python salts ``hash()`` per process, and every node of
    the cluster must compute the same offset.
    """
    if jitter_seconds < 0:
        raise ValueError(f"jitter_seconds must be >= 0, got {jitter_seconds}")
    if jitter_seconds == 0:
        return 0
    return _digest(seed) % jitter_seconds


def _digest(text: str) -> int:
    # 64 bits: the modulo bias over field ranges and jitter windows is negligible.
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _parse_interval(text: str, min_interval: timedelta) -> tuple[timedelta, bool]:
    match = _INTERVAL.fullmatch(text)
    if match is None:
        raise InvalidSchedule(
            f"cannot read {text!r}: write e.g. 'every 15m', 'every 1h30m' "
            "or 'every 15m fixed-delay'"
        )
    amount = match["amount"]
    duration = _DURATION.fullmatch(amount)
    if duration is None or not any(duration.groupdict().values()):
        raise InvalidSchedule(
            f"cannot read the interval {amount!r} in {text!r}: use whole numbers with "
            "units d, h, m, s in that order, e.g. '15m', '1h30m', '90s'"
        )
    parts = {unit: int(value or 0) for unit, value in duration.groupdict().items()}
    period = timedelta(days=parts["d"], hours=parts["h"], minutes=parts["m"], seconds=parts["s"])
    floor = max(MIN_INTERVAL, min_interval)
    if period < floor:
        raise InvalidSchedule(
            f"{text!r} fires every {_describe(period)}; the minimum interval is {_describe(floor)}"
        )
    if period > MAX_INTERVAL:
        raise InvalidSchedule(
            f"{text!r} fires every {_describe(period)}; the longest interval is "
            f"{_describe(MAX_INTERVAL)}: use a cron expression such as '0 0 1 1 *'"
        )
    fixed_delay = (match["mode"] or "").lower() == "fixed-delay"
    return period, fixed_delay


def _describe(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    parts = []
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count} {unit}{'' if count == 1 else 's'}")
    return " ".join(parts) or "0 seconds"


def _parse_cron(text: str, seed: str) -> _CronFields:
    expression = text
    if text.startswith("@"):
        macro = _MACROS.get(text.lower())
        if macro is None:
            known = ", ".join(_MACROS)
            raise InvalidSchedule(f"unknown macro {text!r}: use one of {known}")
        text = macro
    for char, hint in (
        ("?", "'?' is Quartz syntax: write '*'"),
        ("#", "'#' (n-th weekday of the month) is not supported"),
    ):
        if char in text:
            raise InvalidSchedule(f"{hint} in {expression!r}")
    if not text.isascii() or not _CRON_CHARS.fullmatch(text):
        bad = next(c for c in text if not (c.isascii() and _CRON_CHARS.fullmatch(c)))
        raise InvalidSchedule(f"unexpected character {bad!r} in {expression!r}")
    parts = text.split()
    if len(parts) != 5:
        extra = ""
        if len(parts) in (6, 7):
            extra = ": seconds and year fields are not supported"
        raise InvalidSchedule(
            f"{expression!r} has {len(parts)} fields; a schedule has 5 "
            f"(minute hour day-of-month month day-of-week){extra}"
        )
    parsed = [_parse_field(part, index, seed, expression) for index, part in enumerate(parts)]
    return _CronFields(
        minutes=parsed[0][0],
        hours=parsed[1][0],
        days=parsed[2][0],
        last_day=parsed[2][1],
        months=parsed[3][0],
        weekdays=parsed[4][0],
        dom_star=parts[2].startswith("*"),
        dow_star=parts[4].startswith("*"),
        wildcard=parts[0].startswith("*") or parts[1].startswith("*"),
    )


def _parse_field(text: str, index: int, seed: str, expression: str) -> tuple[frozenset[int], bool]:
    spec = _FIELDS[index]
    items = text.upper().split(",")
    if len(items) > MAX_LIST_ITEMS:
        raise InvalidSchedule(
            f"the {spec.name} field of {expression!r} lists {len(items)} items; "
            f"the limit is {MAX_LIST_ITEMS}"
        )
    values: set[int] = set()
    last_day = False
    for item in items:
        match = _ITEM.fullmatch(item)
        if match is None:
            raise InvalidSchedule(
                f"cannot read {item!r} in the {spec.name} field of {expression!r}"
            )
        step = _step(match["step"], spec, expression)
        if match["star"]:
            low, high = spec.low, spec.star_high
        elif match["hash"]:
            if match["hlow"]:
                low = _value(match["hlow"], spec, expression)
                high = _value(match["hhigh"], spec, expression)
                _check_order(low, high, spec, expression)
            else:
                low, high = spec.hash_low, spec.hash_high
            # Jenkins' H: a value that looks random but is the same on every node
            # and every run, so that many "hourly" jobs do not all start at :00.
            digest = _digest(f"{seed}{index}")
            if step is None:
                values.add(low + digest % (high - low + 1))
                continue
            low += digest % step
        elif match["last"]:
            if index != 2:
                raise InvalidSchedule(
                    f"'L' (last day of the month) belongs in the day-of-month field, "
                    f"not the {spec.name} field of {expression!r}"
                )
            if step is not None:
                raise InvalidSchedule(f"'L' takes no step in {expression!r}")
            last_day = True
            continue
        else:
            low = _value(match["low"], spec, expression)
            if match["high"]:
                high = _value(match["high"], spec, expression)
                # SUN is 0, but FRI-SUN plainly means Friday to Sunday.
                if index == 4 and high == 0 and low > 0:
                    high = 7
                _check_order(low, high, spec, expression)
            else:
                # "5/15" (Quartz style) runs from 5 to the end of the field.
                high = spec.star_high if step is not None else low
        values.update(range(low, high + 1, step or 1))
    if index == 4 and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values), last_day


def _step(text: str | None, spec: _FieldSpec, expression: str) -> int | None:
    if text is None:
        return None
    width = spec.high - spec.low + 1
    if len(text) > 3 or not 1 <= int(text) <= width:
        raise InvalidSchedule(
            f"step /{text} in the {spec.name} field of {expression!r} must be between 1 and {width}"
        )
    return int(text)


def _value(token: str, spec: _FieldSpec, expression: str) -> int:
    if token.isdigit():
        if len(token) <= 3 and spec.low <= int(token) <= spec.high:
            return int(token)
        raise InvalidSchedule(
            f"{token} is out of range for the {spec.name} field of {expression!r} "
            f"({spec.low}-{spec.high})"
        )
    if token in spec.names:
        return spec.names[token]
    if not spec.names:
        raise InvalidSchedule(
            f"cannot read {token!r} in the {spec.name} field of {expression!r}: "
            "names are allowed only for months (JAN-DEC) and weekdays (SUN-SAT)"
        )
    raise InvalidSchedule(
        f"unknown name {token!r} in the {spec.name} field of {expression!r} (use {spec.names_hint})"
    )


def _check_order(low: int, high: int, spec: _FieldSpec, expression: str) -> None:
    if low > high:
        raise InvalidSchedule(
            f"range {low}-{high} in the {spec.name} field of {expression!r} runs "
            f"backwards: write {low}-{spec.high},{spec.low}-{high}"
        )


def _check_fires(fields: _CronFields, expression: str) -> None:
    """Refuse an expression whose days never exist (``0 0 30 2 *``)."""
    # When both day fields are restricted either one suffices, and every weekday
    # occurs in every month. Otherwise the day of month must exist in some listed
    # month; the weekday then comes round within 28 years (Feb 29 included).
    if not (fields.dom_star or fields.dow_star) or fields.last_day:
        return
    if any(min(fields.days) <= _MAX_MONTH_DAYS[m] for m in fields.months):
        return
    days = ",".join(str(d) for d in sorted(fields.days))
    months = [_MONTH_TITLES[m] for m in sorted(fields.months)]
    in_months = months[0] if len(months) == 1 else f"{', '.join(months[:-1])} or {months[-1]}"
    raise InvalidSchedule(
        f"day-of-month {days} never occurs in {in_months}: {expression!r} would never fire"
    )


def _check_frequency(fields: _CronFields, expression: str, min_interval: timedelta) -> None:
    """Refuse an expression that may fire more often than ``min_interval``."""
    # Conservative: any two consecutive days are assumed to match, so the gap
    # from the last slot of a day to the first of the next counts as well.
    seconds = _slot_seconds(fields)
    gaps: Iterable[int] = (b - a for a, b in zip(seconds, seconds[1:], strict=False))
    shortest = min(itertools.chain(gaps, [86400 - seconds[-1] + seconds[0]]))
    if timedelta(seconds=shortest) < min_interval:
        raise InvalidSchedule(
            f"{expression!r} fires every {_describe(timedelta(seconds=shortest))}; "
            f"the minimum interval is {_describe(min_interval)}"
        )


@lru_cache(maxsize=1)
def _known_zones() -> dict[str, str]:
    """Every IANA zone name this machine knows, by its lower-case spelling."""
    names = (
        name
        for name in zoneinfo.available_timezones()
        if name not in _NOT_ZONES and not name.startswith(("posix/", "right/"))
    )
    return {name.lower(): name for name in names}


def _load_zone(name: str) -> zoneinfo.ZoneInfo:
    example = "an IANA time zone name such as 'Europe/Berlin' or 'UTC'"
    if not isinstance(name, str) or len(name) > 64 or not _ZONE_NAME.fullmatch(name):
        raise InvalidSchedule(f"{name!r} is not {example}")
    known = _known_zones().get(name.lower())
    if known != name:
        hint = f": did you mean {known!r}?" if known else f"; use {example}"
        raise InvalidSchedule(f"unknown time zone {name!r}{hint}")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidSchedule(f"unknown time zone {name!r}; use {example}") from exc
