"""A job and a cron described once: their columns, from which the store
derives the rest.

A job is two things: its *description* (what a create gives: owner, type,
target, payload, limits...) and its *state* (status, attempt, lease,
errors, times: the state machine of DESIGN.md). The state is the same for
every job and is written by hand where the state machine moves it. The
description is listed here, once; from this list come:

- the named SQL's column lists (``{job.given}`` and the like, expanded into
  literal text once, when :mod:`cluster.store.sql` loads: the planner sees
  plain SQL),
- the PostgreSQL store's create values (single, lean binary, batch rows)
  and the record it decodes from a row (:mod:`cluster.store.postgres.rows`),
- the in-memory store's new records (:func:`record_from_params`).

A cron's definition is listed the same way (:data:`CRON_GIVEN`, the named
SQL's ``{cron.given}`` and the like): its insert, batch insert, update,
the store's parameters and :meth:`~cluster.model.crons.CronRecord.from_row`
come from it.

Adding a field to a job: a :class:`~cluster.model.jobs.JobRecord` field and
a :class:`~cluster.model.jobs.CreateJobParams` field of the same name, a
:class:`Column` here, a migration that adds the column to ``jobs``,
``jobs_far`` and ``job_history`` (in that same position in each: the
pause and mover statements copy rows whole), and the API schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from cluster.model.jobs import CreateJobParams, JobRecord, JobStatus

__all__ = [
    "BATCH_EXTRAS",
    "CRON_GIVEN",
    "CRON_IDENTITY",
    "CRON_READ",
    "JOB_CARRIED",
    "JOB_GIVEN",
    "JOB_READ",
    "Column",
    "column_lists",
    "job_column_lists",
    "record_from_params",
]


@dataclass(frozen=True)
class Column:
    """One column of a job's description.

    ``field``: the attribute of :class:`CreateJobParams` that gives it, and
    of :class:`JobRecord` that shows it (None: not shown, as ``target_kind``,
    which the target holds). ``param``: its named placeholder in a single
    create (``%(owner)s``). ``sql_type``: its type, as a create's values are
    cast to it. ``nullable``: a create may leave it NULL. ``changes``: a retry may give it a new value (run_at,
    max_attempts); every other column is carried through every move as it is.
    """

    name: str
    field: str | None
    param: str
    sql_type: str
    changes: bool = False
    nullable: bool = False

    @property
    def source(self) -> str:
        """The attribute of CreateJobParams that gives the value."""
        return self.field or self.name


# In the order of the tables' columns and of a create's values.
JOB_GIVEN: tuple[Column, ...] = (
    Column("id", "id", "id", "uuid"),
    Column("owner_service", "owner", "owner", "varchar"),
    Column("idempotency_key", "idempotency_key", "key", "varchar", nullable=True),
    Column("type", "type", "type", "varchar"),
    Column("cron_id", "cron_id", "cron_id", "uuid", nullable=True),
    Column("scheduled_for", "scheduled_for", "scheduled_for", "timestamptz"),
    Column("run_at", "run_at", "run_at", "timestamptz", changes=True),
    Column("max_attempts", "max_attempts", "max_attempts", "int", changes=True),
    Column("timeout_seconds", "timeout_seconds", "timeout_seconds", "int"),
    Column("target_kind", None, "target_kind", "varchar"),
    Column("target", "target", "target", "jsonb"),
    Column("payload", "payload", "payload", "jsonb"),
    Column("labels", "labels", "labels", "jsonb", nullable=True),
)
# What a record shows of the description.
JOB_READ = tuple(c for c in JOB_GIVEN if c.field is not None)
# What every move between tables keeps as it is (a retry included).
JOB_CARRIED = tuple(c for c in JOB_GIVEN if not c.changes)
# A batch create's row carries these after the given columns: the key's
# fingerprint (for the ledger) and where the job goes (the far table, or
# the horizon the statement places it by on the database's clock).
BATCH_EXTRAS: tuple[tuple[str, str], ...] = (
    ("fingerprint", "text"),
    ("far", "bool"),
    ("far_horizon_seconds", "float8"),
)

# A cron's definition, in the order of cron_jobs' columns: what a create
# writes and an update replaces (but its identity).
CRON_GIVEN: tuple[Column, ...] = (
    Column("id", "id", "id", "uuid"),
    Column("owner_service", "owner", "owner", "varchar"),
    Column("name", "name", "name", "varchar"),
    Column("schedule", "schedule", "schedule", "varchar"),
    Column("schedule_kind", "schedule_kind", "schedule_kind", "varchar"),
    Column("time_zone", "time_zone", "time_zone", "varchar"),
    Column("type", "type", "type", "varchar"),
    Column("target_kind", None, "target_kind", "varchar"),
    Column("target", "target", "target", "jsonb"),
    Column("payload", "payload", "payload", "jsonb"),
    Column("misfire_policy", "misfire_policy", "misfire_policy", "varchar"),
    Column("concurrency", "concurrency", "concurrency", "varchar"),
    Column("jitter_seconds", "jitter_seconds", "jitter_seconds", "int"),
    Column("max_attempts", "max_attempts", "max_attempts", "int"),
    Column("timeout_seconds", "timeout_seconds", "timeout_seconds", "int"),
    Column(
        "starting_deadline_seconds",
        "starting_deadline_seconds",
        "starting_deadline_seconds",
        "int",
        nullable=True,
    ),
    Column("enabled", "enabled", "enabled", "bool"),
    Column("anchor", "anchor", "anchor", "timestamptz"),
    Column("next_fire_at", "next_fire_at", "next_fire_at", "timestamptz", nullable=True),
    Column("fingerprint", "fingerprint", "fingerprint", "varchar"),
    Column("month_end_policy", "month_end_policy", "month_end_policy", "varchar"),
    Column("dst_policy", "dst_policy", "dst_policy", "varchar"),
    Column("start_at", "start_at", "start_at", "timestamptz", nullable=True),
    Column("end_at", "end_at", "end_at", "timestamptz", nullable=True),
    Column("max_runs", "max_runs", "max_runs", "int", nullable=True),
    Column("calendar", "calendar", "calendar", "varchar", nullable=True),
    Column("calendar_policy", "calendar_policy", "calendar_policy", "varchar", nullable=True),
)
CRON_READ = tuple(c for c in CRON_GIVEN if c.field is not None)
# What an update never changes: the row it matches.
CRON_IDENTITY = ("id", "owner_service", "name")
# An array of each column, for a batch (unnest); JSON travels as text.
_ARRAY_TYPES = {"varchar": "text", "jsonb": "text"}

for _c in JOB_GIVEN:
    if _c.source not in CreateJobParams._fields and not hasattr(CreateJobParams, _c.source):
        raise RuntimeError(f"CreateJobParams has no {_c.source!r} for column {_c.name}")
for _c in JOB_READ:
    if _c.field not in JobRecord.__dataclass_fields__:
        raise RuntimeError(f"JobRecord has no field {_c.field!r} for column {_c.name}")


def _names(columns: tuple[Column, ...], prefix: str) -> str:
    return ", ".join(f"{prefix}{c.name}" for c in columns)


def _batch_row() -> str:
    """A batch row's values read by position from its JSON array
    (``(r->>0)::uuid AS id``; JSON values stay JSON: ``r->10 AS target``,
    but a nullable one's JSON null is SQL's NULL: ``(r->>12)::jsonb``)."""
    out = []
    nullable = {c.name for c in JOB_GIVEN if c.nullable}
    typed = [(c.name, c.sql_type) for c in JOB_GIVEN] + list(BATCH_EXTRAS)
    for at, (name, sql_type) in enumerate(typed):
        if sql_type == "jsonb" and name not in nullable:
            out.append(f"r->{at} AS {name}")
        elif sql_type in ("varchar", "text"):
            out.append(f"r->>{at} AS {name}")
        else:
            out.append(f"(r->>{at})::{sql_type} AS {name}")
    return ", ".join(out)


def _cron_lists(prefix: str) -> dict[str, str]:
    return {
        "given": _names(CRON_GIVEN, prefix),
        "given_params": ", ".join(f"%({c.param})s" for c in CRON_GIVEN),
        # A batch's arrays, one per column, named as the columns (insert_crons).
        "given_arrays": ", ".join(
            f"%({c.name})b::{_ARRAY_TYPES.get(c.sql_type, c.sql_type)}[]" for c in CRON_GIVEN
        ),
        # The batch's values as the columns take them (JSON came as text).
        "given_cast": ", ".join(
            f"{prefix}{c.name}::jsonb" if c.sql_type == "jsonb" else f"{prefix}{c.name}"
            for c in CRON_GIVEN
        ),
        # An update: every column but the identity, from its parameter.
        "set_params": ", ".join(
            f"{c.name} = %({c.param})s" for c in CRON_GIVEN if c.name not in CRON_IDENTITY
        ),
        "read": _names(CRON_READ, prefix),
    }


def column_lists(table: str, prefix: str = "") -> dict[str, str]:
    """The lists the named SQL refers to as ``{<table>.<list>}``, ``table``
    being ``job`` or ``cron`` (see :func:`job_column_lists`)."""
    if table == "cron":
        return _cron_lists(prefix)
    if table == "job":
        return job_column_lists(prefix)
    raise ValueError(f"no column lists for {table!r}")


def job_column_lists(prefix: str = "") -> dict[str, str]:
    """The lists the named SQL refers to as ``{job.<name>}`` (with a table
    alias as ``{job.<name>:j}``), each as literal SQL text."""
    return {
        # Every column a create writes, in order.
        "given": _names(JOB_GIVEN, prefix),
        # A single create's values, as named placeholders.
        "given_params": ", ".join(f"%({c.param})s" for c in JOB_GIVEN),
        # The same, cast to the columns' types (for INSERT ... SELECT).
        "given_params_cast": ", ".join(f"%({c.param})s::{c.sql_type}" for c in JOB_GIVEN),
        # A batch row's values by position (insert_jobs_batch).
        "batch_row": _batch_row(),
        # What a record shows of the description (get_job, search_jobs).
        "read": _names(JOB_READ, prefix),
        # What every move keeps as it is (to the history, and back by a retry).
        "carried": _names(JOB_CARRIED, prefix),
    }


_RECORD_FIELDS = tuple(c.source for c in JOB_READ)
_RECORD_VALUES = attrgetter(*_RECORD_FIELDS)


def record_from_params(p: CreateJobParams, **state: Any) -> JobRecord:
    """The record of a job just created from ``p``: its description as
    given, SCHEDULED with no attempt yet; ``state`` sets more (created_at)."""
    return JobRecord(
        **dict(zip(_RECORD_FIELDS, _RECORD_VALUES(p), strict=True)),
        status=JobStatus.SCHEDULED,
        attempt=0,
        **state,
    )
