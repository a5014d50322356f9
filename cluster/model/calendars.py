"""Calendars: business days, holidays and working weekends, as a stored record.

A calendar names the days a business works: its business week (Monday to
Friday by default), the days it does not work although the week says it
would (``excludeDates``: public holidays) and the days it works although the
week says it would not (``includeDates``: a working Saturday), read in its
time zone. Every change is a new version; a deletion is a version too (a
tombstone), so copies of a calendar on several shards converge whatever order
the writes reach them in (see :mod:`cluster.services.calendars`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cached_property

__all__ = [
    "WEEKDAY_NAMES",
    "CalendarBody",
    "CalendarRecord",
]

# date.weekday() order: Monday is 0.
WEEKDAY_NAMES = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")


@dataclass(frozen=True)
class CalendarBody:
    """What a user says about a calendar; validated (names, zone, dates)."""

    time_zone: str
    exclude_dates: tuple[date, ...] = ()
    include_dates: tuple[date, ...] = ()
    # date.weekday() numbers, Monday = 0.
    business_week: frozenset[int] = frozenset(range(5))
    description: str | None = None

    def is_business_day(self, day: date) -> bool:
        if day in self._included:
            return True
        return day.weekday() in self.business_week and day not in self._excluded

    # Asked for on every slot the materializer plans: each set is built once
    # per body (cached_property writes the instance's __dict__ directly, which
    # a frozen dataclass allows; equality still reads the fields only).
    @cached_property
    def _excluded(self) -> frozenset[date]:
        return frozenset(self.exclude_dates)

    @cached_property
    def _included(self) -> frozenset[date]:
        return frozenset(self.include_dates)

    @property
    def fingerprint(self) -> str:
        """A digest of the body: equal bodies, equal digests, on every node. It
        breaks ties between two writes of one version (the greater wins)."""
        text = json.dumps(
            [
                self.time_zone,
                [d.isoformat() for d in sorted(self.exclude_dates)],
                [d.isoformat() for d in sorted(self.include_dates)],
                sorted(self.business_week),
                self.description,
            ]
        )
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def week_names(self) -> list[str]:
        return [WEEKDAY_NAMES[d] for d in sorted(self.business_week)]


@dataclass(frozen=True)
class CalendarRecord:
    """One version of an owner's calendar, as a shard stores it."""

    owner: str
    name: str
    version: int
    body: CalendarBody
    deleted: bool = False
    created_at: datetime | None = field(default=None, compare=False)
    updated_at: datetime | None = field(default=None, compare=False)

    @property
    def order(self) -> tuple[int, str]:
        """Copies converge on the greatest (version, fingerprint)."""
        return (self.version, self.body.fingerprint)
