"""From text to schedule: validate what users write and build the schedule.

:func:`parse_schedule` is the one way in: the API calls it to validate what
users send (and shows them :meth:`~cluster.cron.firing.Schedule.fires` as a
preview); the materializer asks the result for
:meth:`~cluster.cron.firing.Schedule.next_fire` after the last instant it
stored. Pure functions of (expression, time zone, instant): no clock, no I/O,
no database.

Three kinds of schedule come out:

* ``CRON`` (:mod:`cluster.cron.wall_clock`): five fields or a macro, read in an
  IANA time zone at each firing, with its DST and month-end policies.
* ``FIXED_RATE`` and ``FIXED_DELAY`` (:mod:`cluster.cron.intervals`):
  ``every 15m`` and ``every 15m fixed-delay``.

What users may write, and why an expression is refused, is the grammar's
business (:mod:`cluster.cron.expression`); this module checks time zone names
and policies, picks the kind, and derives stable jitter.
"""

from __future__ import annotations

import importlib.resources
import re
import zoneinfo
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from cluster.cron.day_forms import BusinessDay
from cluster.cron.expression import (
    MAX_EXPRESSION_LENGTH,
    MAX_INTERVAL,
    MIN_INTERVAL,
    CronFields,
    InvalidSchedule,
    is_wildcard,
    parse_expression,
    stable_digest,
)
from cluster.cron.firing import Schedule
from cluster.cron.intervals import FixedDelaySchedule, FixedRateSchedule
from cluster.cron.wall_clock import (
    DST_POLICIES,
    MONTH_END_POLICIES,
    CronSchedule,
    DstPolicy,
    MonthEndPolicy,
)
from cluster.instants import utc

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "InvalidSchedule",
    "is_wildcard",
    "load_zone",
    "parse_schedule",
    "stable_jitter",
    "zone_names",
]

_DEFAULT_ANCHOR = datetime(1970, 1, 1, tzinfo=UTC)

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
    month_end: MonthEndPolicy = "SKIP",
    dst: DstPolicy = "CRONIE",
    business_day: BusinessDay | None = None,
) -> Schedule:
    """Validate and parse a schedule; raise :class:`InvalidSchedule` with a usable message.

    ``seed`` (the cron job's id) fixes the values that ``H`` fields pick.
    ``min_interval`` refuses schedules that may fire more often than that.
    ``anchor`` (aware) is where a fixed-rate grid starts; default 1970-01-01 UTC.
    ``month_end`` and ``dst`` are the policies of :mod:`cluster.cron.wall_clock`
    (cron expressions only; interval schedules have neither month ends nor wall clocks).
    ``business_day`` is what ``nBD`` and ``LBD`` count (a calendar's rule;
    Monday to Friday when None).
    """
    if month_end not in MONTH_END_POLICIES:
        raise InvalidSchedule(f"monthEndPolicy must be one of {', '.join(MONTH_END_POLICIES)}")
    if dst not in DST_POLICIES:
        raise InvalidSchedule(f"dstPolicy must be one of {', '.join(DST_POLICIES)}")
    # The expression first: its errors are the likelier mistake, and say more.
    parsed = parse_expression(expression, seed=seed, min_interval=min_interval)
    text, rule = parsed.text, parsed.rule
    zone = _load_zone(time_zone)
    if isinstance(rule, CronFields):
        return CronSchedule(
            text, time_zone, zone, rule, month_end=month_end, dst=dst, business_day=business_day
        )
    if rule.fixed_delay:
        return FixedDelaySchedule(text, time_zone, zone, rule.period)
    start = _DEFAULT_ANCHOR if anchor is None else utc(anchor)
    return FixedRateSchedule(text, time_zone, zone, rule.period, start)


def stable_jitter(seed: str, jitter_seconds: int) -> int:
    """A stable offset in ``[0, jitter_seconds)`` for ``seed`` (0 when jitter is 0).

    SHA-256, not ``hash()``: Python salts ``hash()`` per process, and every node of
    the cluster must compute the same offset.
    """
    if jitter_seconds < 0:
        raise ValueError(f"jitter_seconds must be >= 0, got {jitter_seconds}")
    if jitter_seconds == 0:
        return 0
    return stable_digest(seed) % jitter_seconds


@lru_cache(maxsize=1)
def _known_zones() -> dict[str, str]:
    """Every IANA zone name, by its lower-case spelling: the list of the
    ``tzdata`` package, whose version uv.lock pins, not the machine's
    (``zoneinfo.available_timezones()`` merges both): the API's document
    lists these names, and a machine with another tzdata must not publish
    another document. Their rules still come from the machine first."""
    listed = importlib.resources.files("tzdata").joinpath("zones").read_text().split()
    names = (
        name
        for name in listed
        if name not in _NOT_ZONES and not name.startswith(("posix/", "right/"))
    )
    return {name.lower(): name for name in names}


def zone_names() -> list[str]:
    """The zone names :func:`load_zone` accepts, sorted (the API's document
    lists them)."""
    return sorted(_known_zones().values())


def load_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone ``name`` as this machine knows it; :class:`InvalidSchedule` otherwise."""
    return _load_zone(name)


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
