"""The one builder of a cron: a :class:`~cluster.model.CronDefinition`
checked (a schedule that parses and fires again within its bounds) and
turned into the :class:`~cluster.model.CronRecord` the store keeps.

The API (through the service layer), crons-as-code's ``lint`` and the
planner read a definition's schedule through :func:`parse_terms`, so the
three cannot disagree on what a schedule means. Pure: no I/O, no settings
(the minimum interval is an argument).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Protocol

import shardmap
from cluster.cron.calendar_rules import CALENDAR_POLICIES, check_calendar_name
from cluster.cron.day_forms import BusinessDay
from cluster.cron.firing import Fire, Schedule
from cluster.cron.schedule import MIN_INTERVAL, parse_schedule
from cluster.cron.wall_clock import DstPolicy, MonthEndPolicy
from cluster.errors import InvalidRequest
from cluster.model import CronDefinition, CronRecord

__all__ = [
    "ANCHOR",
    "FirstSlots",
    "ScheduleTerms",
    "build_cron",
    "check_calendar_terms",
    "first_slot",
    "first_slot_of",
    "parse_terms",
]

# The Unix epoch anchors fixed-rate schedules: `every 15m` fires at :00, :15, …
ANCHOR = datetime(1970, 1, 1, tzinfo=UTC)


class ScheduleTerms(Protocol):
    """What a schedule is read from: a :class:`CronDefinition`, a stored
    :class:`CronRecord` or the materializer's lighter ``DueCron``."""

    @property
    def schedule(self) -> str: ...
    @property
    def time_zone(self) -> str: ...
    @property
    def month_end_policy(self) -> str: ...
    @property
    def dst_policy(self) -> str: ...


class _Slots(Protocol):
    def next_fire(self, after: datetime) -> Fire | None: ...


def parse_terms(
    terms: ScheduleTerms,
    *,
    seed: str,
    anchor: datetime = ANCHOR,
    min_interval: timedelta = MIN_INTERVAL,
    business_day: BusinessDay | None = None,
) -> Schedule:
    """The schedule of ``terms``. ``seed`` is the cron's id (what ``H``
    fields read); before a cron has one, any stable text gives an example.
    ``business_day``: the rule of the calendar the cron follows (``nBD``, ``LBD``)."""
    return parse_schedule(
        terms.schedule.strip(),
        terms.time_zone,
        seed=seed,
        min_interval=min_interval,
        anchor=anchor,
        month_end=_month_end(terms.month_end_policy),
        dst=_dst(terms.dst_policy),
        business_day=business_day,
    )


def _month_end(value: str) -> MonthEndPolicy:
    return "CLAMP" if value == "CLAMP" else "SKIP"


def _dst(value: str) -> DstPolicy:
    return "SKIP" if value == "SKIP" else "BOTH" if value == "BOTH" else "CRONIE"


def first_slot(
    schedule: _Slots, now: datetime, start_at: datetime | None, end_at: datetime | None
) -> datetime | None:
    """Where a new (or re-timed) cron starts: its first slot after ``now``,
    and not before ``start_at``; None when that is past ``end_at``."""
    after = now
    if start_at is not None and start_at > now:
        after = start_at - timedelta(microseconds=1)  # a slot at start_at itself counts
    fire = schedule.next_fire(after)
    if fire is None or (end_at is not None and fire.scheduled_for > end_at):
        return None
    return fire.scheduled_for


def first_slot_of(
    definition: CronDefinition, schedule: _Slots, now: datetime, *, may_end: bool = False
) -> datetime | None:
    """The definition's first slot after ``now``; a definition that never
    fires again is a 422 (unless ``may_end``: a change may end a cron)."""
    first = first_slot(schedule, now, definition.start_at, definition.end_at)
    if first is None and not may_end:
        if definition.end_at is not None:
            raise InvalidRequest(
                "the schedule has no slot between now (or startAt) and endAt", field="endAt"
            )
        raise InvalidRequest("schedule never fires again", field="schedule")
    return first


# A batch's first slots, by (expression, zone, policies): its crons share a
# few schedules, and parsing one and finding its next slot was most of a
# cron's cost. Made per batch: `now` is the batch's.
FirstSlots = dict[tuple[str, str, str, str], tuple[str, datetime | None]]


def build_cron(
    definition: CronDefinition,
    *,
    cron_id: uuid.UUID,
    owner: str,
    now: datetime,
    min_interval: timedelta,
    first_slots: FirstSlots | None = None,
    may_end: bool = False,
) -> CronRecord:
    """The record of ``definition``, checked: a schedule that parses (no
    more often than ``min_interval``) and fires again within its bounds,
    unless ``may_end``. ``first_slots`` shares the work across a batch."""
    definition = check_calendar_terms(definition)
    expression = definition.schedule.strip()
    # Jenkins' H fields read the seed (the cron's id): such a schedule is its
    # own. Any "h" at all is taken for one; a false alarm only costs a parse.
    # Bounds make a cron's first slot its own too.
    shared = (
        first_slots is not None
        and "h" not in expression.lower()
        and definition.start_at is None
        and definition.end_at is None
    )
    key = (expression, definition.time_zone, definition.month_end_policy, definition.dst_policy)
    known = first_slots.get(key) if first_slots is not None and shared else None
    if known is None:
        schedule = parse_terms(
            definition, seed=shardmap.encode_id("cron", cron_id), min_interval=min_interval
        )
        known = (schedule.kind, first_slot_of(definition, schedule, now, may_end=may_end))
        if first_slots is not None and shared:
            first_slots[key] = known
    kind, first = known
    if expression != definition.schedule:
        definition = definition._replace(schedule=expression)
    return definition.record(
        id=cron_id, owner=owner, schedule_kind=kind, anchor=ANCHOR, next_fire_at=first
    )


def check_calendar_terms(definition: CronDefinition) -> CronDefinition:
    """A calendar's policy checked: SKIP when a calendar is named without one."""
    policy = definition.calendar_policy
    if definition.calendar is None:
        if policy is not None:
            raise InvalidRequest(
                "calendarPolicy needs a calendar: name one in 'calendar'", field="calendarPolicy"
            )
        return definition
    check_calendar_name(definition.calendar, "calendar")
    if policy is None:
        return definition._replace(calendar_policy="SKIP")
    if policy not in CALENDAR_POLICIES:
        raise InvalidRequest(
            f"calendarPolicy must be one of {', '.join(CALENDAR_POLICIES)}", field="calendarPolicy"
        )
    return definition
