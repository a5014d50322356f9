"""A job's row on PostgreSQL: the create's values as each statement takes
them, and the record read back from a row.

Every list here is derived from the job's columns
(:mod:`cluster.model.columns`), as are the named SQL's column lists: a new
field of a job needs no edit in this module."""

from __future__ import annotations

import dataclasses
import re
import struct
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from cluster.model import AttemptRecord, CreateJobParams, JobRecord, JobStatus
from cluster.model.columns import BATCH_EXTRAS, JOB_GIVEN, JOB_READ, Column
from cluster.model.jsontext import json_bytes, json_text
from cluster.store.sql import QUERIES
from cluster.store.watched import Statement

# A create's values in the columns' order, as one C call.
_GIVEN_VALUES = attrgetter(*(c.source for c in JOB_GIVEN))
_BATCH_EXTRA_VALUES = attrgetter(*(name for name, _ in BATCH_EXTRAS))
_PARAMS = tuple(c.param for c in JOB_GIVEN)


def _job_fields(p: CreateJobParams) -> dict[str, Any]:
    """A create's parameters, unadapted: the job's values, then the key's
    fingerprint (each row of a batch holds them in this order)."""
    fields = dict(zip(_PARAMS, _GIVEN_VALUES(p), strict=True))
    fields["fingerprint"] = p.fingerprint
    return fields


def _positional(name: str) -> tuple[str, tuple[str, ...]]:
    """A named query with its ``%(x)s`` placeholders as ``$1``, ``$2``…
    (what :meth:`WatchedConnection.run` takes), and the names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, QUERIES[name]), tuple(names)


# A keyless single create's two statements, run through WatchedConnection.run
# with _job_values: uuids and instants in binary (16 bytes; microseconds
# since 2000 as eight), a quarter of the cost of their text; the rest text.
_BINARY = ("uuid", "timestamptz")
_JOB_COLUMNS = _PARAMS
_JOB_FORMATS = tuple(1 if c.sql_type in _BINARY else 0 for c in JOB_GIVEN)


# insert_job_placed takes the horizon after the values (as text).
_PLACED = "insert_job_placed"


def _lean_insert(name: str) -> Statement:
    """``name`` as a statement for :meth:`WatchedConnection.run`, checked to
    take the values :func:`lean_values` writes, in its order."""
    sql, names = _positional(name)
    want, formats = _JOB_COLUMNS, _JOB_FORMATS
    if name == _PLACED:
        want, formats = (*want, "far_horizon"), (*formats, 0)
    if names != want:
        raise RuntimeError(f"{name} takes {names}, not _job_values' {want}")
    return Statement(name, sql, formats)


_LEAN_INSERTS = {name: _lean_insert(name) for name in ("insert_job", "insert_far_job", _PLACED)}


def insert_statement(p: CreateJobParams) -> str:
    """The single create's statement: placed on the database's clock when
    ``p`` has a horizon, else in the table its ``far`` says."""
    if p.far_horizon_seconds is not None:
        return _PLACED
    return "insert_far_job" if p.far else "insert_job"


def lean_values(p: CreateJobParams, encoding: str) -> list[bytes | None]:
    """The values of :func:`insert_statement`'s statement on the lean path."""
    values = _job_values(p, encoding)
    if p.far_horizon_seconds is not None:
        values.append(str(float(p.far_horizon_seconds)).encode())
    return values


_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_INT8 = struct.Struct("!q").pack


def _pg_instant(at: datetime) -> bytes:
    """``at`` (aware) as timestamptz's binary form."""
    since = at - _PG_EPOCH
    return _INT8((since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds)


def _compiled(name: str, args: str, body: str, **names: Any) -> Any:
    """A function made once, when the module loads, from the columns: the
    straight-line code a hand-written one would be (a loop over the
    columns took twice the time on the create path), without the hand."""
    namespace = dict(names)
    exec(f"def {name}({args}):\n    return {body}\n", namespace)
    return namespace[name]


def _encoded(c: Column) -> str:
    value = f"p.{c.source}"
    encode = {
        # A JSON null payload is JSON's null, not SQL's; a nullable JSON
        # column's None (labels) is SQL's NULL.
        "jsonb": f"json_bytes({value})",
        "uuid": f"{value}.bytes",
        "timestamptz": f"_pg_instant({value})",
        "int": f'b"%d" % {value}',
        "varchar": f"{value}.encode(encoding)",
    }[c.sql_type]
    return f"None if {value} is None else {encode}" if c.nullable else encode


def _adapted(c: Column) -> str:
    """``c``'s value as psycopg takes it in :func:`_job_row`."""
    value = f"p.{c.source}"
    if c.sql_type != "jsonb":
        return value
    adapt = f"Jsonb({value}, json_bytes)"
    return f"None if {value} is None else {adapt}" if c.nullable else adapt


# A create's values in ``insert_job``'s order and formats: what psycopg's
# adaptation of _job_row sends, without it.
_job_values: Callable[[CreateJobParams, str], list[bytes | None]] = _compiled(
    "_job_values",
    "p, encoding",
    "[" + ", ".join(_encoded(c) for c in JOB_GIVEN) + "]",
    _pg_instant=_pg_instant,
    json_bytes=json_bytes,
)
# A create's parameters as the single statements take them, where it goes
# included (insert_job_placed, insert_job_again) (orjson's text,
# json_bytes, for the JSON values, not psycopg's default json.dumps: a tenth
# of the CPU, two values a create).
_job_row: Callable[[CreateJobParams], dict[str, Any]] = _compiled(
    "_job_row",
    "p",
    "{"
    + ", ".join(f"{c.param!r}: {_adapted(c)}" for c in JOB_GIVEN)
    + ", 'fingerprint': p.fingerprint, 'far': p.far, 'far_horizon': p.far_horizon_seconds}",
    Jsonb=Jsonb,
    json_bytes=json_bytes,
)


# insert_jobs_batch's rows are arrays: a job's values in this order, which
# the statement is checked to read when the module loads.
_BATCH_COLUMNS = (*(c.name for c in JOB_GIVEN), *(name for name, _ in BATCH_EXTRAS))


def _check_batch_columns(name: str) -> None:
    """Raise unless statement ``name`` reads :data:`_BATCH_COLUMNS` from a row
    array, each at its position (``(r->>0)::uuid AS id``, ``r->>1 AS …``)."""
    found = re.findall(r"\br->>?(\d+)\)?(?:::\w+)? AS (\w+)", QUERIES[name])
    columns = tuple(column for _, column in found)
    if [int(at) for at, _ in found] != list(range(len(found))) or columns != _BATCH_COLUMNS:
        raise RuntimeError(f"{name} reads {found}, not _batch_row's {_BATCH_COLUMNS}")


_check_batch_columns("insert_jobs_batch")


def _batch_row(p: CreateJobParams) -> list[Any]:
    """A job as a row of insert_jobs_batch: the values of :func:`_job_fields`
    and ``far``, in :data:`_BATCH_COLUMNS`' order."""
    return [*_GIVEN_VALUES(p), *_BATCH_EXTRA_VALUES(p)]


def _batch_args(jobs: Sequence[CreateJobParams]) -> dict[str, Any]:
    """The batch as one JSON array of rows (insert_jobs_batch)."""
    return {"rows": json_text([_batch_row(p) for p in jobs])}


# A record's described fields and the columns they are read from.
_READ = tuple((c.field, c.name) for c in JOB_READ if c.field is not None)


def _record_from_row(row: dict[str, Any], attempts: tuple[AttemptRecord, ...] = ()) -> JobRecord:
    return JobRecord(
        **{field: row[name] for field, name in _READ},
        # The state: the state machine's columns, the same for every job.
        status=JobStatus(row["status"]),
        attempt=row["attempt"],
        last_error=row["last_error"],
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        attempts=attempts,
        paused_at=row.get("paused_at"),
        pause_reason=row.get("pause_reason"),
    )


# A created job's record: one per job a create writes, 1,000 in a batch. A
# frozen dataclass's __init__ sets the 19 fields one object.__setattr__ at a
# time (4.4 us); filling the new record's __dict__ at once makes the same
# object in 0.4 us. test_record_from_params holds it equal to the record
# __init__ makes, so a field added to JobRecord cannot be missed here.
_RECORD_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(JobRecord) if f.default is not dataclasses.MISSING
}
_described: Callable[[CreateJobParams], dict[str, Any]] = _compiled(
    "_described", "p", "{" + ", ".join(f"{field!r}: p.{field}" for field, _ in _READ) + "}"
)


def _record_from_params(p: CreateJobParams) -> JobRecord:
    record: JobRecord = object.__new__(JobRecord)
    fields = record.__dict__
    fields.update(_RECORD_DEFAULTS)
    fields.update(_described(p))
    fields["status"] = JobStatus.SCHEDULED
    fields["attempt"] = 0
    return record


async def fetch_job(
    conn: psycopg.AsyncConnection[Any], job_id: uuid.UUID, owner: str, with_attempts: bool
) -> JobRecord | None:
    """The job (far, near or finished) of ``owner``, with its attempt log
    when ``with_attempts``; None if there is none."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(QUERIES["get_job"], {"id": job_id, "owner": owner})
        row = await cur.fetchone()
        if row is None:
            return None
        attempts: tuple[AttemptRecord, ...] = ()
        if with_attempts:
            await cur.execute(QUERIES["get_attempts"], {"id": job_id})
            attempts = tuple(AttemptRecord(**a) for a in await cur.fetchall())
    return _record_from_row(row, attempts)
