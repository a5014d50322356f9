"""A job (and a cron) is described once (cluster/model/columns.py): every statement that
writes a job's row writes all of its columns, every read of a record reads
them, and the model's records have no field the catalogue does not know.
A field added to the model without its Column, or a statement that lists a
job's columns by hand and misses one, fails here."""

from __future__ import annotations

import dataclasses
import re
import uuid
from datetime import UTC, datetime

from cluster.model import CreateJobParams, CronRecord, JobRecord, JobStatus
from cluster.model.columns import (
    CRON_GIVEN,
    CRON_READ,
    JOB_GIVEN,
    JOB_READ,
    job_column_lists,
    record_from_params,
)
from cluster.store.postgres.rows import _record_from_params
from cluster.store.postgres_cron.rows import cron_columns, cron_row
from cluster.store.sql import QUERIES, expand_columns
from tests.helpers import cron_record

# A record's state: the state machine's fields, the same for every job.
STATE = {
    "status", "attempt", "last_error", "created_at", "finished_at", "attempts", "paused_at",
    "pause_reason",
}  # fmt: skip
# Cron occurrences take their description from their cron's columns (a
# one-shot job's field that a cron has not gets its column's default there).
FROM_A_CRON = {"insert_occurrences", "materialize_crons", "insert_backfill"}
RECORD_READS = {
    "get_job", "get_jobs_by_keys", "search_jobs", "search_jobs_in_status", "search_jobs_of_cron",
}  # fmt: skip
_INSERT = re.compile(r"INSERT INTO (jobs|jobs_far|job_history)\s*(\(([^)]*)\)|SELECT \*)")


def test_every_field_of_a_record_is_described_or_state() -> None:
    fields = {f.name for f in dataclasses.fields(JobRecord)}
    described = {c.field for c in JOB_READ}
    assert fields - STATE == described
    assert not described & STATE


def test_every_described_column_comes_from_the_create() -> None:
    for c in JOB_GIVEN:
        assert hasattr(CreateJobParams, c.source), c


def test_every_write_of_a_job_row_writes_every_column() -> None:
    given = {c.name for c in JOB_GIVEN}
    writes = 0
    for name, sql in QUERIES.items():
        for table, whole, columns in _INSERT.findall(sql):
            writes += 1
            if whole.startswith("SELECT *") or name in FROM_A_CRON:
                continue
            listed = {c.strip() for c in columns.split(",")}
            assert given <= listed, f"{name} writes {table} without {given - listed}"
    assert writes > 10


def test_every_read_of_a_record_reads_every_described_column() -> None:
    read = job_column_lists()["read"]
    for name in RECORD_READS:
        branches = len(re.findall(r"\bFROM (jobs|jobs_far|job_history)\b", QUERIES[name]))
        assert QUERIES[name].count(read) == branches, name


def test_a_column_list_is_expanded_with_its_alias_and_an_unknown_one_refused() -> None:
    assert expand_columns("q", "SELECT {job.carried:o}").startswith("SELECT o.id, o.owner_service")
    try:
        expand_columns("q", "SELECT {job.nothing}")
    except ValueError as exc:
        assert "unknown column list" in str(exc)
    else:
        raise AssertionError("an unknown list was expanded")


def test_both_stores_make_the_same_record_of_a_create() -> None:
    now = datetime.now(UTC)
    p = CreateJobParams(
        id=uuid.uuid4(), owner="svc", type="t", run_at=now, scheduled_for=now,
        target={"kind": "HTTP", "url": "https://o.example"}, payload=[1], max_attempts=3,
        timeout_seconds=30, idempotency_key="k", fingerprint="f", cron_id=uuid.uuid4(),
    )  # fmt: skip
    made = record_from_params(p)
    assert made == _record_from_params(p)
    assert made.status is JobStatus.SCHEDULED and made.attempt == 0


# A cron's state: what the materializer, the fold and pause write.
CRON_STATE = {
    "last_fire_at", "last_success_at", "missed_count", "skipped_count", "created_at", "updated_at",
    "run_count", "paused_at", "pause_reason", "last_result", "last_result_at",
}  # fmt: skip


def test_every_field_of_a_cron_is_described_or_state() -> None:
    fields = {f.name for f in dataclasses.fields(CronRecord)}
    described = {c.field for c in CRON_READ}
    assert fields - CRON_STATE == described
    for c in CRON_GIVEN:
        assert hasattr(CronRecord, c.source) or c.source in fields, c


def test_the_cron_statements_take_what_the_store_passes() -> None:
    record = cron_record("svc", "c", next_fire_at=datetime.now(UTC))
    row, arrays = cron_row(record), cron_columns([record])
    for name, passed in (("insert_cron", row), ("update_cron", row), ("insert_crons", arrays)):
        taken = set(re.findall(r"%\((\w+)\)[sb]", QUERIES[name]))
        # An update matches by id and owner and never renames: it takes the rest.
        assert taken == set(passed) - ({"name"} if name == "update_cron" else set()), name
    assert CronRecord.from_row(
        {**{c.name: getattr(record, c.source) for c in CRON_GIVEN},
         **{f: getattr(record, f) for f in CRON_STATE}}
    ) == record  # fmt: skip
