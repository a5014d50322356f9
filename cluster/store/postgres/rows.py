"""A job's row on PostgreSQL: the create's values as each statement takes
them, and the record read back from a row."""

from __future__ import annotations

import dataclasses
import re
import struct
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from cluster.model import (
    AttemptRecord,
    CreateJobParams,
    JobRecord,
    JobStatus,
)
from cluster.model.jsontext import json_bytes, json_text
from cluster.store.sql import QUERIES
from cluster.store.watched import Statement


def _job_fields(p: CreateJobParams) -> dict[str, Any]:
    """A create's parameters: the single statements' and each row of a batch."""
    return {
        "id": p.id,
        "owner": p.owner,
        "key": p.idempotency_key,
        "fingerprint": p.fingerprint,
        "type": p.type,
        "cron_id": p.cron_id,
        "scheduled_for": p.scheduled_for,
        "run_at": p.run_at,
        "max_attempts": p.max_attempts,
        "timeout_seconds": p.timeout_seconds,
        "target_kind": p.target_kind,
        "target": p.target,
        "payload": p.payload,
    }


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
_JOB_COLUMNS = (
    "id", "owner", "key", "type", "cron_id", "scheduled_for", "run_at",
    "max_attempts", "timeout_seconds", "target_kind", "target", "payload",
)  # fmt: skip

_JOB_FORMATS = tuple(1 if c in ("id", "cron_id", "scheduled_for", "run_at") else 0 for c in _JOB_COLUMNS)


def _lean_insert(name: str) -> Statement:
    """``name`` as a statement for :meth:`WatchedConnection.run`, checked to
    take the values :func:`_job_values` writes, in its order."""
    sql, names = _positional(name)
    if names != _JOB_COLUMNS:
        raise RuntimeError(f"{name} takes {names}, not _job_values' {_JOB_COLUMNS}")
    return Statement(name, sql, _JOB_FORMATS)

_LEAN_INSERTS = {name: _lean_insert(name) for name in ("insert_job", "insert_far_job")}

_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)

_INT8 = struct.Struct("!q").pack


def _pg_instant(at: datetime) -> bytes:
    """``at`` (aware) as timestamptz's binary form."""
    since = at - _PG_EPOCH
    return _INT8((since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds)


def _job_values(p: CreateJobParams, encoding: str) -> list[bytes | None]:
    """A create's values in ``insert_job``'s order and formats: what
    psycopg's adaptation of :func:`_job_row` sends, without it."""
    key = p.idempotency_key
    return [
        p.id.bytes,
        p.owner.encode(encoding),
        None if key is None else key.encode(encoding),
        p.type.encode(encoding),
        None if p.cron_id is None else p.cron_id.bytes,
        _pg_instant(p.scheduled_for),
        _pg_instant(p.run_at),
        b"%d" % p.max_attempts,
        b"%d" % p.timeout_seconds,
        p.target_kind.encode(encoding),
        json_bytes(p.target),
        json_bytes(p.payload),
    ]


def _job_row(p: CreateJobParams) -> dict[str, Any]:
    row = _job_fields(p)
    # orjson's text (json_bytes), not psycopg's default json.dumps: a tenth
    # of the CPU, two values a create.
    row["target"] = Jsonb(p.target, json_bytes)
    row["payload"] = Jsonb(p.payload, json_bytes)
    return row

# insert_jobs_batch's rows are arrays: a job's values in this order, which
# the statement is checked to read when the module loads.
_BATCH_COLUMNS = (
    "id", "owner_service", "idempotency_key", "fingerprint", "type", "cron_id",
    "scheduled_for", "run_at", "max_attempts", "timeout_seconds", "target_kind",
    "target", "payload", "far",
)  # fmt: skip


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
    return [
        p.id, p.owner, p.idempotency_key, p.fingerprint, p.type, p.cron_id, p.scheduled_for,
        p.run_at, p.max_attempts, p.timeout_seconds, p.target_kind, p.target, p.payload, p.far,
    ]  # fmt: skip


def _batch_args(jobs: Sequence[CreateJobParams]) -> dict[str, Any]:
    """The batch as one JSON array of rows (insert_jobs_batch)."""
    return {"rows": json_text([_batch_row(p) for p in jobs])}


def _record_from_row(row: dict[str, Any], attempts: tuple[AttemptRecord, ...] = ()) -> JobRecord:
    return JobRecord(
        id=row["id"],
        owner=row["owner_service"],
        type=row["type"],
        status=JobStatus(row["status"]),
        run_at=row["run_at"],
        scheduled_for=row["scheduled_for"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        timeout_seconds=row["timeout_seconds"],
        target=row["target"],
        payload=row["payload"],
        idempotency_key=row["idempotency_key"],
        cron_id=row["cron_id"],
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


def _record_from_params(p: CreateJobParams) -> JobRecord:
    record: JobRecord = object.__new__(JobRecord)
    fields = record.__dict__
    fields.update(_RECORD_DEFAULTS)
    fields.update(
        id=p.id,
        owner=p.owner,
        type=p.type,
        status=JobStatus.SCHEDULED,
        run_at=p.run_at,
        scheduled_for=p.scheduled_for,
        attempt=0,
        max_attempts=p.max_attempts,
        timeout_seconds=p.timeout_seconds,
        target=p.target,
        payload=p.payload,
        idempotency_key=p.idempotency_key,
        cron_id=p.cron_id,
    )
    return record


async def fetch_job(
    conn: psycopg.AsyncConnection[Any], job_id: uuid.UUID, owner: str, with_attempts: bool
) -> JobRecord | None:
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
