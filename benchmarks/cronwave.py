"""A wave made by crons: N cron jobs, of several owners in several time
zones, whose next firing is the same instant T.

Users write crons at round local hours; across zones those are the same
instant (00:00 in Istanbul is 21:00 UTC, 06:00 in Tokyo, 02:30 in Kolkata).
Here T is any whole minute, so each zone gets ``M H * * *`` with M and H the
local minute and hour of T there; each expression is checked with Vakit's
own schedule code (DST included) to fire next exactly at T, and a zone where
it would not is left out.

The materializer, not the harness, turns the crons into jobs. What is
measured on the way: when the slot's occurrences were created (their rows'
``created_at``, the materializer's transaction start) and when the last of
them became visible to a reader (polled, so after its commit), both against T.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg

from benchmarks.sql import query
from cluster.cron import parse_schedule
from cluster.model import CronDefinition
from cluster.services.cron_document import document_of

__all__ = [
    "DEFAULT_ZONES",
    "WAVE_CALENDAR",
    "SlotWatch",
    "cron_body_factory",
    "holiday_calendar",
    "occurrence_figures",
    "slot_at_least",
    "zone_schedules",
]

log = logging.getLogger("benchmarks.cronwave")

# Whole-hour, half-hour and quarter-hour offsets, both hemispheres, zones
# with and without DST: every one must still land on the same instant.
DEFAULT_ZONES = (
    "UTC",
    "Europe/Istanbul",
    "Asia/Tokyo",
    "America/New_York",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Australia/Adelaide",
    "America/Los_Angeles",
)


def slot_at_least(now: datetime, lead: float) -> datetime:
    """The first whole minute at least ``lead`` seconds after ``now``: a cron
    schedule cannot name a finer instant."""
    earliest = now.astimezone(UTC) + timedelta(seconds=lead)
    floor = earliest.replace(second=0, microsecond=0)
    return floor if floor == earliest else floor + timedelta(minutes=1)


def zone_schedules(slot: datetime, zones: tuple[str, ...], now: datetime) -> dict[str, str]:
    """``{zone: "M H * * *"}`` for each zone whose expression next fires
    exactly at ``slot`` after ``now`` (a zone whose local time of ``slot``
    falls in a DST overlap's second pass, say, fires at another instant and is
    left out, with a warning)."""
    out: dict[str, str] = {}
    for zone in zones:
        local = slot.astimezone(ZoneInfo(zone))
        expression = f"{local.minute} {local.hour} * * *"
        fire = parse_schedule(expression, zone, min_interval=timedelta(0)).next_fire(now)
        if fire is None or fire.scheduled_for != slot:
            log.warning("%s in %s does not fire at %s: zone left out", expression, zone, slot)
            continue
        out[zone] = expression
    if not out:
        raise ValueError(f"no zone fires at {slot.isoformat()}")
    return out


# --calendar: every cron follows its owner's calendar of this name.
WAVE_CALENDAR = "wave-holidays"


def holiday_calendar(slot: datetime, holidays: int = 60) -> dict[str, Any]:
    """The body of a calendar (UTC) with ``holidays`` excluded days over the
    year after ``slot``, every third day from the day after it, and ``slot``'s
    own day a business day: the crons fire at T, and the materializer reads a
    calendar of a country's size for each of them."""
    first = slot.astimezone(UTC).date() + timedelta(days=1)
    return {
        "name": WAVE_CALENDAR,
        "timeZone": "UTC",
        "excludeDates": [(first + timedelta(days=3 * k)).isoformat() for k in range(holidays)],
        "businessWeek": ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"],
        "description": "benchmarks.wave --calendar",
    }


def cron_body_factory(
    schedules: dict[str, str],
    target: dict[str, Any],
    *,
    owner_index: int,
    owners: int,
    name_prefix: str,
    extra: dict[str, Any] | None = None,
) -> Callable[[int], dict[str, Any]]:
    """The request body of one owner's i-th cron. The run's crons take the
    zones in turn across owners, so every owner has crons in every zone.
    ``extra``: fields every cron has too (``calendar``, ``calendarPolicy``)."""
    zones = list(schedules.items())
    # One create document per zone, written by the definition type every door
    # shares; each cron is that document under its own name (a copy per cron,
    # not a definition per cron: the client's CPU is on the wave's machine).
    documents = [
        document_of(
            CronDefinition(
                name=name_prefix,
                schedule=expression,
                time_zone=zone,
                type="bench.cron",
                target=target,
                payload={},
                max_attempts=3,
                timeout_seconds=30,
            ),
            compact=True,
        )
        | (extra or {})
        for zone, expression in zones
    ]

    def body(i: int) -> dict[str, Any]:
        # "-n" before the number: a name like "wave-1e-100" reads as a number
        # to the API's strict-JSON screen (digits as 9, "-" dropped: 9e999),
        # which then parses every body a second time (11 us a cron), in about
        # one run in nine, by the random tag.
        return {**documents[(i * owners + owner_index) % len(zones)], "name": f"{name_prefix}-n{i}"}

    return body


@dataclass
class SlotWatch:
    """Polls the shards, from a thread, for the jobs of ``owners`` due at
    ``slot`` until all ``expected`` exist or ``until`` passes: the first
    moment a reader saw the whole slot.

    One count per shard each ``interval`` s; it stops as soon as it has seen
    them all, so it adds nothing to the CPU of the wave itself.
    """

    dsns: list[str]
    owners: list[str]
    slot: datetime
    expected: int
    until: datetime
    interval: float = 1.0
    seen_all_at: datetime | None = None
    last_count: int = 0
    last_count_at: datetime | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-slot-watch", daemon=True)

    def __enter__(self) -> SlotWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def count(self) -> int:
        args = {"owners": self.owners, "slot": self.slot}

        def one(dsn: str) -> int:
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute(query("slot_jobs_visible"), args).fetchone()
            return int(row[0]) if row else 0

        with ThreadPoolExecutor(max_workers=len(self.dsns)) as pool:
            return sum(pool.map(one, self.dsns))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                n = self.count()
            except psycopg.Error:
                log.exception("counting the slot's jobs failed")
                n = self.last_count
            now = datetime.now(UTC)
            self.last_count, self.last_count_at = n, now
            if n >= self.expected:
                self.seen_all_at = now
                return
            if now >= self.until:
                return
            self._stop.wait(self.interval)

    def wait(self, timeout: float) -> None:
        self._thread.join(timeout)

    def as_dict(self) -> dict[str, Any]:
        slot = self.slot.timestamp()
        return {
            "seen_all_vs_slot_seconds": (
                round(self.seen_all_at.timestamp() - slot, 3) if self.seen_all_at else None
            ),
            "last_count": self.last_count,
            "last_count_vs_slot_seconds": (
                round(self.last_count_at.timestamp() - slot, 3) if self.last_count_at else None
            ),
            "poll_interval_seconds": self.interval,
        }


def occurrence_figures(
    dsns: list[str], owners: list[str], slot: datetime, expected: int
) -> dict[str, Any]:
    """After the wave: the slot's occurrences on every shard, wherever they
    ended up. ``crons`` = distinct crons with an occurrence (one job per cron
    and slot is the database's promise; ``jobs`` > ``crons`` would break it)."""
    args = {"owners": owners, "slot": slot}

    def one(dsn: str) -> dict[str, Any]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            jobs, crons, before, first, last = conn.execute(
                query("slot_occurrences"), args
            ).fetchone() or (0, 0, 0, None, None)
            defined = conn.execute(query("owner_crons"), args).fetchone()
        return {
            "jobs": jobs,
            "crons": crons,
            "before": before,
            "first": first,
            "last": last,
            "defined": defined[0] if defined else 0,
        }

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(dsns)) as pool:
        shards = list(pool.map(one, dsns))
    firsts = [s["first"] for s in shards if s["first"] is not None]
    lasts = [s["last"] for s in shards if s["last"] is not None]
    t = slot.timestamp()
    jobs = sum(s["jobs"] for s in shards)
    before = sum(s["before"] for s in shards)
    log.info("occurrences read in %.1f s", time.monotonic() - started)
    return {
        "expected": expected,
        "crons_defined": sum(s["defined"] for s in shards),
        "jobs": jobs,
        "distinct_crons": sum(s["crons"] for s in shards),
        "created_before_slot": before,
        "all_created_before_slot": jobs == expected and before == expected,
        "first_created_vs_slot_seconds": round(min(firsts) - t, 3) if firsts else None,
        "last_created_vs_slot_seconds": round(max(lasts) - t, 3) if lasts else None,
        "per_shard": [{k: s[k] for k in ("defined", "jobs", "crons", "before")} for s in shards],
    }
