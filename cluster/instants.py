"""Instants as text: the one way Vakit reads and writes a point in time.

Every instant that leaves Vakit (the API's answers, a firing's
``scheduledFor`` and ``Idempotency-Key``, a ZooKeeper member record) is RFC
3339 in UTC with a ``Z``; every instant that comes in must carry an offset
(a naive time is a bug waiting for DST). Pure: no clock, no I/O.

Written as ``isoformat()`` of the UTC instant with ``+00:00`` as ``Z``
(microseconds shown only when not zero). The firing body and headers are an
interface receivers deduplicate on, so the instant is always UTC, whatever
zone the database session hands timestamps out in.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import lru_cache

__all__ = [
    "EARLIEST",
    "INSTANT_PATTERN",
    "LATEST",
    "format_instant",
    "parse_instant",
    "require_aware",
    "utc",
]

# The instants Vakit accepts: later steps add hours or years to them.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)
_EXAMPLE = "e.g. 2026-10-23T14:30:00Z"

# The instants parse_instant accepts, as a regular expression that the API's
# document publishes and its validation applies first (JSON Schema's and
# pydantic's dialects both read it; [0-9], as \d is any Unicode digit to
# pydantic): RFC 3339 with a T and an offset, from 1970 and before 9000, as
# written and in UTC: the text alone says whether it is accepted, so an instant
# whose offset moves it across a bound is refused (1970-01-01 east of UTC,
# 8999-12-31 west of it) and so is one whose written date is out (1969-12-31
# west of UTC). A day a month lacks (02-30) is the date-time format's.
_DAY = r"(?:0[1-9]|[12][0-9]|3[01])"
_DATE = rf"(?:0[1-9]|1[0-2])-{_DAY}"
_TIME = r"[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?"
_HOURS = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]"
_MIDDLE_YEARS = r"(?:197[1-9]|19[89][0-9]|[2-7][0-9]{3}|8[0-8][0-9]{2}|89[0-8][0-9]|899[0-8])"
INSTANT_PATTERN = (
    "^(?:"
    rf"(?:{_MIDDLE_YEARS}-{_DATE}"
    rf"|1970-(?:01-(?:0[2-9]|[12][0-9]|3[01])|(?:0[2-9]|1[0-2])-{_DAY})"
    rf"|8999-(?:12-(?:0[1-9]|[12][0-9]|30)|(?:0[1-9]|1[01])-{_DAY})"
    rf"){_TIME}(?:[Zz]|[+-]{_HOURS})"
    rf"|1970-01-01{_TIME}(?:[Zz]|[+-]00:00|-{_HOURS})"
    rf"|8999-12-31{_TIME}(?:[Zz]|[+-]00:00|\+{_HOURS})"
    ")$"
)


def require_aware(value: datetime, name: str = "datetime") -> datetime:
    """Refuse naive datetimes at the edges: a naive time is a bug waiting for DST."""
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(f"{name} must carry a UTC offset, got naive {value.isoformat()}")
    return value


def utc(value: datetime) -> datetime:
    """``value`` (aware) in UTC; a naive one is refused."""
    return require_aware(value).astimezone(UTC)


def format_instant(value: datetime) -> str:
    """``value`` as RFC 3339 in UTC: ``2026-10-23T14:30:00Z``, or
    ``2026-10-23T14:30:00.250000Z`` with microseconds. Naive is refused."""
    if value.tzinfo is not UTC:
        value = utc(value)
    # In UTC isoformat() always ends in "+00:00". A worker formats each
    # firing's scheduledFor: slicing is cheaper than replace().
    return value.isoformat()[:-6] + "Z"


def parse_instant(value: str, name: str = "time") -> datetime:
    """RFC 3339 with a mandatory offset, from :data:`EARLIEST` and before
    :data:`LATEST`; naive or vague times are refused (``ValueError`` naming
    ``name``). The offset is kept: :func:`utc` it for UTC."""
    if isinstance(value, str):
        # The API's validator parses runAt, then its handler needs the
        # datetime: the second parse of the same text is a cache hit.
        return _parse(value, name)
    raise ValueError(f"{name} must be an RFC 3339 timestamp with an offset, {_EXAMPLE}")


@lru_cache(maxsize=1024)
def _parse(value: str, name: str) -> datetime:
    match = _RFC3339.match(value)
    if not match:
        raise ValueError(f"{name} must be an RFC 3339 timestamp with an offset, {_EXAMPLE}")
    text = value.replace("z", "Z").replace("t", "T")
    fraction = match.group(1)
    if fraction is not None and len(fraction) > 7:
        # Python parses at most 6 fractional digits: drop the nanoseconds.
        text = text.replace(fraction, fraction[:7], 1)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{name} is not a valid date and time: {value!r}") from exc
    # Compared as aware instants (no arithmetic, so no OverflowError):
    # 0001-01-01T00:30+01:00 is before year 1 in UTC, and every later step
    # (to UTC, + a horizon, a cron's next slot) would overflow.
    if not EARLIEST <= parsed < LATEST:
        raise ValueError(
            f"{name} must be from {format_instant(EARLIEST)} and before {format_instant(LATEST)}"
        )
    return parsed
