"""A batch create's rows are arrays read by position (insert_jobs_batch):
each holds the values the single create's statements take, and a
statement that reads them elsewhere is refused. The real statement is
checked when cluster.store.postgres loads (an import of this test would
fail), and the batch tests on real shards read back what it wrote."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from cluster.model import CreateJobParams
from cluster.store.postgres import rows as postgres
from cluster.store.sql import QUERIES


@pytest.mark.parametrize(
    ("key", "far", "horizon"), [(None, False, None), ("order-98213", True, None), (None, False, 3600.0)]
)
def test_a_batch_row_holds_the_single_creates_values_in_order(
    key: str | None, far: bool, horizon: float | None
) -> None:
    now = datetime.now(UTC)
    p = CreateJobParams(
        id=uuid.uuid4(), owner="svc", type="order.cancel", run_at=now + timedelta(seconds=3),
        scheduled_for=now, target={"kind": "HTTP", "url": "https://o.example/x"},
        payload={"order": 1}, max_attempts=3, timeout_seconds=30, idempotency_key=key,
        fingerprint="f" * 64 if key else None, cron_id=uuid.uuid4(), far=far,
        far_horizon_seconds=horizon,
    )  # fmt: skip
    row = postgres._batch_row(p)
    assert row == [*postgres._job_fields(p).values(), far, horizon]
    assert len(row) == len(postgres._BATCH_COLUMNS)


@pytest.mark.parametrize(
    "select",
    [
        # Two columns swapped: the row's owner would be read as its key.
        "(r->>0)::uuid AS id, r->>2 AS owner_service, r->>1 AS idempotency_key",
        # A column missing.
        "(r->>0)::uuid AS id, r->>1 AS owner_service",
    ],
)
def test_a_statement_reading_columns_out_of_place_is_refused(
    select: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    columns = postgres._BATCH_COLUMNS
    rest = ", ".join(f"r->>{i} AS {c}" for i, c in enumerate(columns) if i > 2)
    monkeypatch.setitem(
        QUERIES, "bad_batch", f"SELECT {select}, {rest} FROM jsonb_array_elements('[]') AS rows(r)"
    )
    with pytest.raises(RuntimeError, match="bad_batch reads"):
        postgres._check_batch_columns("bad_batch")
