"""A single create's values, encoded by the store itself (_job_values), are
the bytes psycopg's own adaptation of the same row sends, each in the format
its statement declares: psycopg's dumpers are the oracle."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from psycopg.adapt import PyFormat, Transformer

from cluster.model import CreateJobParams
from cluster.store.postgres.rows import (
    _JOB_COLUMNS,
    _LEAN_INSERTS,
    _job_row,
    _job_values,
    insert_statement,
    lean_values,
)

ISTANBUL = timezone(timedelta(hours=3))


@pytest.mark.parametrize(
    "at",
    [
        datetime(2026, 12, 6, 9, 30, 0, 123456, tzinfo=UTC),
        datetime(2026, 12, 6, 12, 30, 0, 1, tzinfo=ISTANBUL),  # another offset, one microsecond
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # before PostgreSQL's epoch
        datetime(2000, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 50, 999999, tzinfo=UTC),
    ],
)
@pytest.mark.parametrize(
    ("key", "cron", "labels"),
    [(None, None, None), ("order-98213 ğüş", uuid.uuid4(), {"team": "ödeme", "k8s.io/app": ""})],
)
def test_the_values_are_what_psycopg_would_send(
    at: datetime, key: str | None, cron: uuid.UUID | None, labels: dict[str, str] | None
) -> None:
    p = CreateJobParams(
        id=uuid.uuid4(), owner="svc-ödeme", type="order.cancel", run_at=at + timedelta(seconds=7),
        scheduled_for=at, target={"kind": "HTTP", "url": "https://o.example/x"},
        payload={"order": 98213, "note": "ş", "nested": [1.5, None, True]},
        max_attempts=3, timeout_seconds=30, idempotency_key=key, cron_id=cron, labels=labels,
    )  # fmt: skip
    row = _job_row(p)
    formats = _LEAN_INSERTS["insert_job"].formats
    assert formats is not None and len(formats) == len(_JOB_COLUMNS)
    transformer = Transformer()
    expected: list[bytes | None] = []
    for column, fmt in zip(_JOB_COLUMNS, formats, strict=True):
        value = row[column]
        if value is None:
            expected.append(None)
            continue
        dumper = transformer.get_dumper(value, PyFormat.BINARY if fmt else PyFormat.TEXT)
        dumped = dumper.dump(value)
        assert dumped is not None
        expected.append(bytes(dumped))
    assert _job_values(p, "utf-8") == expected


def test_a_placed_create_takes_the_values_and_then_its_horizon() -> None:
    now = datetime.now(UTC)
    p = CreateJobParams(
        id=uuid.uuid4(), owner="svc", type="t", run_at=now, scheduled_for=now,
        target={"kind": "HTTP", "url": "https://o.example/x"}, payload=None, max_attempts=3,
        timeout_seconds=30, far_horizon_seconds=3600,
    )  # fmt: skip
    assert insert_statement(p) == "insert_job_placed"
    assert insert_statement(p._replace(far_horizon_seconds=None, far=True)) == "insert_far_job"
    placed, single = _LEAN_INSERTS["insert_job_placed"].formats, _LEAN_INSERTS["insert_job"].formats
    assert placed is not None and single is not None and tuple(placed) == (*single, 0)
    assert lean_values(p, "utf-8") == [*_job_values(p, "utf-8"), b"3600.0"]
