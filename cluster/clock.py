"""Time as an injected dependency.

Code asks a :class:`Clock` for "now" instead of calling ``datetime.now()``, so
tests can move time forward instead of sleeping. The database's ``now()`` stays
the authority for leases; queries take an optional ``now`` parameter
(``coalesce(%(now)s, now())``) that only tests pin.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock", "check_aware", "utc"]


class Clock(Protocol):
    def now(self) -> datetime:
        """An aware datetime in UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock that only moves when told to; thread safe."""

    def __init__(self, start: datetime) -> None:
        self._now = utc(start)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta | float) -> datetime:
        if not isinstance(delta, timedelta):
            delta = timedelta(seconds=delta)
        with self._lock:
            self._now += delta
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = utc(when)


def check_aware(value: datetime, name: str = "datetime") -> datetime:
    """Refuse naive datetimes at the edges: a naive time is a bug waiting for DST."""
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(f"{name} must carry a UTC offset, got naive {value.isoformat()}")
    return value


def utc(value: datetime) -> datetime:
    return check_aware(value).astimezone(UTC)
