"""Cron jobs: definitions, occurrences and the parameter objects of the
cron store seam and the materializer."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any, NamedTuple

import shardmap
from cluster.model.columns import CRON_READ

__all__ = [
    "TIMING_FIELDS",
    "CronDefinition",
    "CronRecord",
    "CronRun",
    "CronRunsParams",
    "DeleteCronParams",
    "DueCountsParams",
    "DueCron",
    "DueCronsParams",
    "GetCronParams",
    "LastSuccessParams",
    "ListCronsParams",
    "MaterializeBatchParams",
    "MaterializeParams",
    "MaterializeResult",
    "Occurrence",
    "PendingInfo",
    "PendingParams",
    "PruneOccurrencesParams",
    "TriggerCronParams",
    "WaitingCronsParams",
]


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    """The later of two optional instants (a cron's folded last success and
    the successes the fold has not reached yet)."""
    if a is None or b is None:
        return a or b
    return max(a, b)


def _last_result(row: dict[str, Any]) -> dict[str, Any]:
    """The folded last result (migration 12), or the newer one the fold has
    not reached yet (``recent_result*``, where the read asked for it)."""
    status, at = row.get("last_result"), row.get("last_result_at")
    recent, recent_at = row.get("recent_result"), row.get("recent_result_at")
    if recent_at is not None and (at is None or recent_at >= at):
        status, at = recent, recent_at
    return {"last_result": status, "last_result_at": at}


# What a definition's fingerprint reads, always.
_DEFINING = (
    "schedule", "time_zone", "type", "target", "payload", "misfire_policy", "concurrency",
    "jitter_seconds", "max_attempts", "timeout_seconds", "starting_deadline_seconds", "enabled",
)  # fmt: skip
# Fields added later count only when set: a cron defined before them keeps
# its fingerprint, so repeating its create is still a 200, not a 409.
_OPTIONAL_DEFAULTS: dict[str, Any] = {
    "month_end_policy": "SKIP", "dst_policy": "CRONIE", "start_at": None, "end_at": None,
    "max_runs": None, "calendar": None, "calendar_policy": None,
}  # fmt: skip
# The fields that say when a cron fires: a change to any of them picks the
# first slot again; a change to none keeps the slot the materializer is at.
TIMING_FIELDS = (
    "schedule", "time_zone", "enabled", "month_end_policy", "dst_policy", "start_at", "end_at",
    "max_runs", "calendar", "calendar_policy",
)  # fmt: skip


class CronDefinition(NamedTuple):
    """A cron job as its owner defines it, whatever the door (the API, a
    crons-as-code file, the benchmarks): the one shape the builder
    (:func:`cluster.cron.definition.build_cron`) checks and turns into a
    :class:`CronRecord`. A named tuple, as :class:`CreateJobParams` is: a
    batch create makes a thousand, and a frozen dataclass of 18 fields cost
    3.4 us a cron to make.

    ``type`` None means the name's first 64 characters (what the record
    holds); the fingerprint reads it as given, so a repeat of a create
    that left it out still matches. Instants are aware UTC datetimes."""

    name: str
    schedule: str
    time_zone: str
    target: dict[str, Any]
    type: str | None = None
    payload: Any = None
    misfire_policy: str = "RUN_ONCE"
    concurrency: str = "ALLOW"
    jitter_seconds: int = 0
    max_attempts: int = 3
    timeout_seconds: int = 60
    starting_deadline_seconds: int | None = None
    enabled: bool = True
    month_end_policy: str = "SKIP"
    dst_policy: str = "CRONIE"
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    # A calendar of the owner's (by name) and what becomes of a slot on a day
    # it does not work: SKIP, NEXT_BUSINESS_DAY, PREVIOUS_BUSINESS_DAY.
    calendar: str | None = None
    calendar_policy: str | None = None

    @property
    def record_type(self) -> str:
        """The job type its occurrences carry."""
        return self.type or self.name[:64]

    def fingerprint(self) -> str:
        """A stable digest of what the definition says (its name aside): a
        create that repeats a name with the same digest is a repeat (200),
        with another a conflict (409). Stored: the recipe must not change."""
        defining = dict(zip(_DEFINING, _defining_values(self), strict=True))
        for (key, default), value in zip(_OPTIONAL, _optional_values(self), strict=True):
            if value != default:
                defining[key] = value
        return hashlib.sha256(_FINGERPRINT_JSON.encode(defining).encode()).hexdigest()

    def record(
        self,
        *,
        id: uuid.UUID,
        owner: str,
        schedule_kind: str,
        anchor: datetime,
        next_fire_at: datetime | None,
    ) -> CronRecord:
        """The record that keeps this definition (what a builder decided:
        its id, its schedule's kind and anchor, its first slot)."""
        values = self._asdict()
        values.update(
            type=self.record_type,
            id=id,
            owner=owner,
            schedule_kind=schedule_kind,
            anchor=anchor,
            next_fire_at=next_fire_at,
            fingerprint=self.fingerprint(),
        )
        return _new_record(values)


_DEFINITION_FIELDS = CronDefinition._fields
# The fingerprint's values read by position (a named tuple's getattr per
# field was a tenth of a create's build), and its encoder made once:
# ``json.dumps`` with options makes a new one a call. The text is exactly
# ``json.dumps(defining, sort_keys=True, default=str)``'s, as stored.
_defining_values = itemgetter(*(_DEFINITION_FIELDS.index(k) for k in _DEFINING))
_OPTIONAL = tuple(_OPTIONAL_DEFAULTS.items())
_optional_values = itemgetter(*(_DEFINITION_FIELDS.index(k) for k in _OPTIONAL_DEFAULTS))
_FINGERPRINT_JSON = json.JSONEncoder(sort_keys=True, default=str)


@dataclass(frozen=True)
class CronRecord:
    id: uuid.UUID
    owner: str
    name: str
    schedule: str
    schedule_kind: str
    time_zone: str
    type: str
    target: dict[str, Any]
    payload: Any
    misfire_policy: str
    concurrency: str
    jitter_seconds: int
    max_attempts: int
    timeout_seconds: int
    starting_deadline_seconds: int | None
    enabled: bool
    anchor: datetime
    next_fire_at: datetime | None
    fingerprint: str
    last_fire_at: datetime | None = None
    last_success_at: datetime | None = None
    missed_count: int = 0
    skipped_count: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    # Policies and bounds (migration 7): what a cron without them did before.
    month_end_policy: str = "SKIP"
    dst_policy: str = "CRONIE"
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    run_count: int = 0  # occurrences the schedule made (not manual triggers)
    paused_at: datetime | None = None  # no slot is materialized while paused
    pause_reason: str | None = None
    # The outcome of the occurrence that finished last (SUCCEEDED, FAILED or
    # SKIPPED; a cancelled one is no result) and when it finished.
    last_result: str | None = None
    last_result_at: datetime | None = None
    calendar: str | None = None  # migration 23
    calendar_policy: str | None = None

    @property
    def id_text(self) -> str:
        return shardmap.encode_id("cron", self.id)

    @property
    def target_kind(self) -> str:
        return str(self.target["kind"])

    @property
    def definition(self) -> CronDefinition:
        """What its owner defined (the type as stored): the base of a change."""
        return CronDefinition(**{k: getattr(self, k) for k in _DEFINITION_FIELDS})

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> CronRecord:
        """A ``cron_jobs`` row: the definition's columns as
        :mod:`cluster.model.columns` lists them, then the cron's state."""
        values = dict(zip(_READ_FIELDS, _read_values(row), strict=True))
        values.update(
            last_fire_at=row["last_fire_at"],
            last_success_at=_later(row["last_success_at"], row.get("recent_success_at")),
            missed_count=row["missed_count"],
            skipped_count=row["skipped_count"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            run_count=row["run_count"],
            paused_at=row.get("paused_at"),
            pause_reason=row.get("pause_reason"),
            **_last_result(row),
        )
        return _new_record(values)


# A record's described fields and the columns they are read from, by name.
_READ_FIELDS = tuple(c.field for c in CRON_READ if c.field is not None)
_read_values = itemgetter(*(c.name for c in CRON_READ))
# A batch create makes two records a cron (its definition's, and the row's
# the insert returns), 2,000 a batch. A frozen dataclass's __init__ sets the
# 36 fields one object.__setattr__ at a time (7 us); filling the new
# record's __dict__ at once makes the same object in a tenth of that, as
# the job store's records are made (cluster/store/postgres/rows.py).
# tests/unit/test_cron_records.py holds both makers equal to __init__'s.
_RECORD_DEFAULTS = {
    f.name: f.default
    for f in dataclasses.fields(CronRecord)
    if f.default is not dataclasses.MISSING
}


def _new_record(values: dict[str, Any]) -> CronRecord:
    """A record of ``values``: every field without a default, and any other."""
    record: CronRecord = object.__new__(CronRecord)
    fields = record.__dict__
    fields.update(_RECORD_DEFAULTS)
    fields.update(values)
    return record


@dataclass(frozen=True)
class Occurrence:
    job_id: uuid.UUID
    scheduled_for: datetime
    run_at: datetime
    deadline_at: datetime | None


@dataclass(frozen=True)
class PendingInfo:
    pending: int
    last_finished: datetime | None


@dataclass(frozen=True)
class CronRun:
    job_id: uuid.UUID
    scheduled_for: datetime
    run_at: datetime
    status: str
    attempt: int
    last_error: str | None
    finished_at: datetime | None
    lateness_seconds: float | None


@dataclass(frozen=True)
class MaterializeParams:
    cron_id: uuid.UUID
    expected_next: datetime | None  # compare-and-set on next_fire_at
    occurrences: tuple[Occurrence, ...]
    next_fire_at: datetime | None
    last_fire: datetime | None
    missed: int = 0
    skipped: int = 0
    runs: int = 0  # what the cron's run_count grows by (its occurrences)
    # The version of the cron's calendar it was planned by (0: no calendar);
    # the write loses if a change re-planned the cron by a later one.
    calendar_version: int = 0
    # Whether ``next_fire_at`` is a settled slot (:attr:`DueCron.settled`).
    settled: bool = True


@dataclass(frozen=True)
class GetCronParams:
    id: uuid.UUID
    owner: str


@dataclass(frozen=True)
class ListCronsParams:
    """A page of an owner's crons by name, after the name ``after``."""

    owner: str
    after: str = ""
    limit: int = 50


@dataclass(frozen=True)
class DeleteCronParams:
    id: uuid.UUID
    owner: str


@dataclass(frozen=True)
class TriggerCronParams:
    """One extra occurrence of ``cron``, outside its schedule."""

    cron: CronRecord
    occurrence: Occurrence


@dataclass(frozen=True)
class CronRunsParams:
    cron_id: uuid.UUID
    limit: int = 50


class DueCron(NamedTuple):
    """What the materializer plans from: a cron's timing, not its target or
    payload (the write copies those inside the database). A named tuple,
    made straight from a row: a pass reads thousands."""

    id: uuid.UUID
    schedule: str
    schedule_kind: str
    time_zone: str
    anchor: datetime
    misfire_policy: str
    concurrency: str
    jitter_seconds: int
    starting_deadline_seconds: int | None
    next_fire_at: datetime | None
    month_end_policy: str = "SKIP"
    dst_policy: str = "CRONIE"
    end_at: datetime | None = None
    max_runs: int | None = None
    run_count: int = 0
    # The calendar it follows (migration 23), which the materializer reads
    # from the shard's copy by (owner, name).
    owner: str = ""
    calendar: str | None = None
    calendar_policy: str | None = None
    # False for a PREVIOUS_BUSINESS_DAY cron whose next_fire_at a later slot
    # may run before (migration 25): planning goes on to a settled slot.
    settled: bool = True

    @property
    def id_text(self) -> str:
        return shardmap.encode_id("cron", self.id)


@dataclass(frozen=True)
class DueCronsParams:
    """Enabled crons with ``next_fire_at <= until``, in (next_fire_at, id)
    order, after the keyset position ``after`` (None: from the start)."""

    until: datetime
    after: tuple[datetime, uuid.UUID] | None = None
    limit: int = 2000
    unsettled_until: datetime | None = None
    """The crons not yet settled (:attr:`DueCron.settled`) are due up to
    this later instant (None: ``until``): a slot of theirs may run weeks
    before it is due."""


@dataclass(frozen=True)
class DueCountsParams:
    """How many enabled crons are due in each second up to ``until``; the
    overdue ones (before ``now``) are counted in ``now``'s second."""

    now: datetime
    until: datetime


@dataclass(frozen=True)
class WaitingCronsParams:
    """Fixed-delay crons waiting for their occurrence to finish
    (``next_fire_at`` NULL), by id after ``after``."""

    limit: int = 2000
    after: uuid.UUID | None = None


@dataclass(frozen=True)
class LastSuccessParams:
    """The ``limit`` enabled crons whose last success (or creation) is
    oldest: the silent ones, which the alert needs, without a series per
    cron of a million."""

    limit: int = 1000
    # The PostgreSQL store first folds the history's successes into the
    # crons (fold_cron_successes): up to this many seconds ago, at most
    # about this many cron occurrences a transaction, in windows of time
    # that hold about fold_read_rows history rows of any job, for at most
    # this long a call (what is left waits for the next call).
    fold_lag_seconds: float = 30.0
    fold_limit: int = 2000
    fold_read_rows: int = 20_000
    fold_budget_seconds: float = 2.0


@dataclass(frozen=True)
class PendingParams:
    cron_ids: tuple[uuid.UUID, ...]
    with_finished: bool = False  # also when each cron's latest occurrence finished (fixed delay)


@dataclass(frozen=True)
class PruneOccurrencesParams:
    """The janitor's batch of the occurrence ledger: at most ``limit`` rows
    made before ``before`` for slots before it, whose job is not pending
    (done, or its history expired). No slot that old can be made again: a
    materializer makes none before its cron's next fire time, and a
    backfill none older than the retention."""

    before: datetime
    limit: int = 10_000


@dataclass(frozen=True)
class MaterializeBatchParams:
    """Occurrences of many crons and their ``next_fire_at`` moves, written at
    once. Each item is a compare-and-set on its cron's ``next_fire_at``: a
    cron whose CAS fails (another materializer moved it, or holds its row)
    gets none of its occurrences written. An occurrence whose ``run_at`` is
    beyond ``now + far_horizon_seconds`` goes to the far table."""

    items: tuple[MaterializeParams, ...]
    now: datetime
    far_horizon_seconds: float


@dataclass(frozen=True)
class MaterializeResult:
    advanced: frozenset[uuid.UUID]  # crons whose compare-and-set won
    created: int  # occurrences written (near and far)
    # FORBID crons whose new occurrence met a pending one at the last moment
    # (a manual trigger in between): the slot is used, no job was made.
    refused: tuple[uuid.UUID, ...] = ()
