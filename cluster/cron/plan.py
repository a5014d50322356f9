"""The pure planning step of the materializer.

:func:`plan` decides, from a definition, its schedule and "now", which slots
become occurrences, which are missed (misfire policy, starting deadline) or
skipped (FORBID), and where ``next_fire_at`` moves. It does no I/O, so the
misfire and concurrency rules are tested with a fake clock alone.

Bounds: no slot after ``end_at`` and no more than ``max_runs`` occurrences
made by the schedule (manual triggers do not count) are planned; a cron that
has reached either gets ``next_fire_at`` None and is due no more. ``start_at``
is applied where the first slot is chosen
(:func:`cluster.cron.definition.first_slot`). A stored cron's schedule is
read by the same :func:`~cluster.cron.definition.parse_terms` that built it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

import shardmap
from cluster.cron.calendar_rules import SETTLE_AHEAD
from cluster.cron.calendar_schedule import CalendarPolicy, CalendarSchedule
from cluster.cron.definition import parse_terms
from cluster.cron.firing import Fire, Schedule
from cluster.cron.schedule import stable_jitter
from cluster.model import CalendarRecord, Occurrence

__all__ = [
    "CronTiming",
    "Plan",
    "ScheduleCache",
    "Slots",
    "cron_slot",
    "exhausted",
    "plan",
    "schedule_of",
]

# Iterating slots is cheap, but a per-minute cron down for a year has 525,600:
# past this many, the rest of the outage is skipped over in one jump.
_MAX_SLOTS_SCANNED = 20_000


def cron_slot(owner: str, name: str) -> int:
    """A cron's slot comes from (owner, name): the per-shard unique constraint
    on the name is then a global one, like an idempotency key."""
    return shardmap.key_slot(owner, "cron\x00" + name)


class CronTiming(Protocol):
    """What planning reads of a cron: a :class:`~cluster.model.CronRecord`
    or the lighter :class:`~cluster.model.DueCron` the materializer pages."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def id_text(self) -> str: ...
    @property
    def schedule(self) -> str: ...
    @property
    def schedule_kind(self) -> str: ...
    @property
    def time_zone(self) -> str: ...
    @property
    def anchor(self) -> datetime: ...
    @property
    def misfire_policy(self) -> str: ...
    @property
    def concurrency(self) -> str: ...
    @property
    def jitter_seconds(self) -> int: ...
    @property
    def starting_deadline_seconds(self) -> int | None: ...
    @property
    def next_fire_at(self) -> datetime | None: ...
    @property
    def month_end_policy(self) -> str: ...
    @property
    def dst_policy(self) -> str: ...
    @property
    def end_at(self) -> datetime | None: ...
    @property
    def max_runs(self) -> int | None: ...
    @property
    def run_count(self) -> int: ...
    @property
    def calendar(self) -> str | None: ...
    @property
    def calendar_policy(self) -> str | None: ...


class Slots(Protocol):
    """Anything that tells the next slot: a :class:`Schedule`, or the
    memoizing view of one that :class:`ScheduleCache` hands out."""

    @property
    def moves(self) -> bool:
        """Whether a slot may be skipped or moved (a calendar): see :meth:`at`."""
        ...

    @property
    def moves_back(self) -> bool:
        """Whether a slot may run before it is due: see :meth:`settled`."""
        ...

    def next_fire(self, after: datetime) -> Fire | None: ...

    def at(self, slot: datetime) -> Fire | None:
        """The firing of a stored slot; None when it no longer fires."""
        ...

    def settled(self, fire: Fire) -> bool:
        """Whether planning may stop before ``fire`` (no later slot runs before it)."""
        ...


def schedule_of(
    cron: CronTiming,
    min_interval: timedelta = timedelta(0),
    calendar: CalendarRecord | None = None,
) -> Schedule:
    """The cron's schedule; with ``calendar`` (the one the cron names, as
    read from its shard) its slots are kept, skipped or moved by it."""
    # Stored definitions were validated against the operator's minimum when
    # written; reading them back must not fail if that minimum changed since.
    if calendar is None or cron.calendar is None:
        return parse_terms(cron, seed=cron.id_text, anchor=cron.anchor, min_interval=min_interval)
    schedule = parse_terms(
        cron,
        seed=cron.id_text,
        anchor=cron.anchor,
        min_interval=min_interval,
        business_day=calendar.body.is_business_day,
    )
    return CalendarSchedule(
        schedule,
        calendar.body,
        _calendar_policy(cron.calendar_policy),
        name=calendar.name,
        version=calendar.version,
    )


def _calendar_policy(value: str | None) -> CalendarPolicy:
    if value == "NEXT_BUSINESS_DAY":
        return "NEXT_BUSINESS_DAY"
    if value == "PREVIOUS_BUSINESS_DAY":
        return "PREVIOUS_BUSINESS_DAY"
    return "SKIP"


def exhausted(cron: CronTiming) -> bool:
    """Whether ``max_runs`` occurrences were made already."""
    return cron.max_runs is not None and cron.run_count >= cron.max_runs


def _needs_seed(expression: str) -> bool:
    """Whether the cron id changes what ``expression`` means: only ``H``
    fields do (a day name such as THU gives a false positive, which costs a
    parse, never a wrong slot). Interval schedules never read the seed."""
    text = expression.lstrip()
    return not text[:5].lower() == "every" and "H" in text.upper()


class _Memo:
    """One parsed schedule and the next slots asked of it: the crons of a
    round hour share their schedule and their current slot, so the slot
    after it is computed once, not once per cron."""

    __slots__ = ("_at", "_next", "moves", "moves_back", "schedule")

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.moves = schedule.moves
        self.moves_back = schedule.moves_back
        self._next: dict[datetime, Fire | None] = {}
        self._at: dict[datetime, Fire | None] = {}

    def at(self, slot: datetime) -> Fire | None:
        # Asked of every cron a calendar moves (its stored slot): the crons
        # of an instant share it, so it is computed once.
        try:
            return self._at[slot]
        except KeyError:
            if len(self._at) >= _MEMO_SLOTS:
                self._at.clear()
            fire = self._at[slot] = self.schedule.at(slot)
            return fire

    def settled(self, fire: Fire) -> bool:
        return self.schedule.settled(fire)

    def next_fire(self, after: datetime) -> Fire | None:
        try:
            return self._next[after]
        except KeyError:
            if len(self._next) >= _MEMO_SLOTS:
                self._next.clear()
            fire = self._next[after] = self.schedule.next_fire(after)
            return fire


# Bounds on what ScheduleCache keeps: past them it starts over (a miss costs
# a parse, about 20 µs), so memory stays flat whatever the crons.
_MEMO_SCHEDULES = 20_000
_MEMO_SLOTS = 256


class ScheduleCache:
    """Parsed schedules by (expression, zone, anchor), and the seed where
    ``H`` fields make it matter, for the materializer's passes.

    A million crons written as ``0 0 * * *`` in a handful of zones are a
    handful of parses and a handful of next-slot computations per pass.
    :class:`~cluster.cron.firing.Schedule` instances are immutable, so
    sharing them is safe."""

    def __init__(self) -> None:
        self._memos: dict[tuple[object, ...], _Memo] = {}

    def slots(self, cron: CronTiming, calendar: CalendarRecord | None = None) -> Slots:
        """``calendar``: the one the cron follows, as its shard holds it now
        (a new version is a new schedule)."""
        seed = cron.id_text if _needs_seed(cron.schedule) else ""
        key: tuple[object, ...] = (
            cron.schedule,
            cron.time_zone,
            cron.anchor,
            seed,
            cron.month_end_policy,
            cron.dst_policy,
        )
        if calendar is not None and cron.calendar is not None:
            key += (calendar.owner, calendar.name, calendar.order, cron.calendar_policy)
        memo = self._memos.get(key)
        if memo is None:
            if len(self._memos) >= _MEMO_SCHEDULES:
                self._memos.clear()
            memo = self._memos[key] = _Memo(schedule_of(cron, calendar=calendar))
        return memo


@dataclass
class Plan:
    occurrences: list[Occurrence] = field(default_factory=list)
    next_fire_at: datetime | None = None
    missed_misfire: int = 0
    missed_deadline: int = 0
    skipped: int = 0
    settled: bool = True
    """Whether ``next_fire_at`` is a settled slot (:meth:`Slots.settled`):
    False leaves the cron due weeks ahead, to be planned again."""

    @property
    def missed(self) -> int:
        return self.missed_misfire + self.missed_deadline

    @property
    def runs(self) -> int:
        """Occurrences this plan makes: what ``run_count`` grows by."""
        return len(self.occurrences)

    @property
    def last_fire(self) -> datetime | None:
        return max((o.scheduled_for for o in self.occurrences), default=None)


def _unsettled(
    schedule: Slots,
    fire: Fire | None,
    cursor: datetime,
    horizon: datetime,
    end: datetime | None,
    planned: int,
) -> bool:
    """Whether planning goes on past the horizon to ``cursor``: a calendar
    may run a later slot before it (:meth:`Slots.settled`), within the
    cron's bounds and the scan's. Not beyond a move's reach past the
    horizon: a slot there runs after it, and a schedule whose every slot
    moves (Saturdays on a weekday calendar) never settles; it stays due
    :data:`~cluster.cron.calendar_rules.SETTLE_AHEAD` early instead."""
    return (
        schedule.moves_back
        and fire is not None
        and (end is None or cursor <= end)
        and cursor <= horizon + SETTLE_AHEAD
        and planned < _MAX_SLOTS_SCANNED
        and not schedule.settled(fire)
    )


def _occurrence(cron: CronTiming, slot: datetime, runs: datetime | None = None) -> Occurrence:
    """The occurrence of ``slot``, run at ``runs`` when a calendar moved it."""
    jitter = stable_jitter(cron.id_text, cron.jitter_seconds) if cron.jitter_seconds else 0
    base = runs or slot
    run_at = base + timedelta(seconds=jitter) if jitter else base
    deadline = (
        run_at + timedelta(seconds=cron.starting_deadline_seconds)
        if cron.starting_deadline_seconds is not None
        else None
    )
    return Occurrence(shardmap.new_uuid(shardmap.slot_of(cron.id)), slot, run_at, deadline)


def plan(
    cron: CronTiming,
    schedule: Slots,
    now: datetime,
    *,
    pending: int,
    lookahead: timedelta,
    misfire_threshold: timedelta,
    catchup_cap: int,
) -> Plan:
    """What one materializer round does for ``cron`` (see the module doc).

    ``pending``: occurrences of this cron still SCHEDULED or RUNNING.
    A slot older than ``now - misfire_threshold`` was missed (downtime, a
    stalled leader): the misfire policy decides whether it still runs.
    A schedule that moves slots back (PREVIOUS_BUSINESS_DAY) is planned past
    the horizon up to a settled slot, which no later slot runs before.
    """
    out = _plan(
        cron,
        schedule,
        now,
        pending=pending,
        lookahead=lookahead,
        misfire_threshold=misfire_threshold,
        catchup_cap=catchup_cap,
    )
    if schedule.moves_back and out.next_fire_at is not None:
        fire = schedule.at(out.next_fire_at)
        out.settled = fire is not None and schedule.settled(fire)
    return out


def _plan(
    cron: CronTiming,
    schedule: Slots,
    now: datetime,
    *,
    pending: int,
    lookahead: timedelta,
    misfire_threshold: timedelta,
    catchup_cap: int,
) -> Plan:
    out = Plan(next_fire_at=cron.next_fire_at)
    first = cron.next_fire_at
    if first is None:
        return out
    # Slots a calendar moved: where each runs (a slot absent runs at itself).
    moved: dict[datetime, datetime] = {}
    fire: Fire | None = None  # the cursor's firing, where a calendar may move it
    if schedule.moves:
        # The stored slot was planned with the calendar as it was then: ask
        # again, since a day may have been excluded or included since.
        fire = schedule.at(first)
        if fire is None:
            nxt = schedule.next_fire(first)
            first = out.next_fire_at = nxt.scheduled_for if nxt else None
            if nxt is None or first is None:
                return out
            fire = nxt
        if fire.moved_to is not None:
            moved[first] = fire.moved_to
    end = cron.end_at
    remaining = None if cron.max_runs is None else cron.max_runs - cron.run_count
    if (remaining is not None and remaining <= 0) or (end is not None and first > end):
        out.next_fire_at = None  # the bounds are reached: due no more
        return out
    horizon = now + lookahead
    if end is not None:
        horizon = min(horizon, end)
    late_edge = now - misfire_threshold

    slots: list[datetime] = []
    after: datetime | None = None
    cursor: datetime | None = first
    while cursor is not None and (
        cursor <= horizon or _unsettled(schedule, fire, cursor, horizon, end, len(slots))
    ):
        slots.append(cursor)
        after = cursor
        if len(slots) >= _MAX_SLOTS_SCANNED and cursor < late_edge:
            # Jump over the rest of a very long outage; counted as missed.
            fire = schedule.next_fire(late_edge)
            out.missed_misfire += (
                1  # at least one more; the exact count is not worth a year of math
            )
        else:
            fire = schedule.next_fire(cursor)
        cursor = fire.scheduled_for if fire else None
        if fire is not None and fire.moved_to is not None:
            moved[fire.scheduled_for] = fire.moved_to
    if not slots:
        return out

    late = [s for s in slots if s < late_edge]
    timely = [s for s in slots if s >= late_edge]
    if cron.misfire_policy == "RUN_ALL":
        keep = late[-catchup_cap:] if catchup_cap > 0 else []
    elif cron.misfire_policy == "RUN_ONCE":
        keep = late[-1:]
    else:  # SKIP
        keep = []
    out.missed_misfire += len(late) - len(keep)
    candidates = keep + timely

    chosen: list[datetime] = []
    one_at_a_time = cron.concurrency == "FORBID" or cron.schedule_kind == "FIXED_DELAY"
    for slot in candidates:
        if one_at_a_time and (pending > 0 or chosen):
            if slot <= now:
                # Its time has come while the previous occurrence is pending:
                # FORBID skips it (and counts it).
                out.skipped += 1
                continue
            # A future slot waits for the previous occurrence to finish.
            out.next_fire_at = slot
            break
        occ = _occurrence(cron, slot, moved.get(slot))
        if occ.deadline_at is not None and occ.deadline_at < now:
            out.missed_deadline += 1
            continue
        chosen.append(slot)
        out.occurrences.append(occ)
        if cron.schedule_kind == "FIXED_DELAY":
            # The next one is planned from this one's finish.
            out.next_fire_at = None
            break
        if remaining is not None and len(chosen) >= remaining:
            out.next_fire_at = None  # maxRuns reached
            break
    else:
        nxt = schedule.next_fire(after) if after is not None else None
        out.next_fire_at = nxt.scheduled_for if nxt else None
        if end is not None and out.next_fire_at is not None and out.next_fire_at > end:
            out.next_fire_at = None  # endAt reached
        if cron.schedule_kind == "FIXED_DELAY" and out.occurrences:
            out.next_fire_at = None
    return out
