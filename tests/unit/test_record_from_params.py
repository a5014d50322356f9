"""The store's fast record of a created job is the record JobRecord's own
__init__ makes: every field, defaults included."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

import pytest

from cluster.model import CreateJobParams, JobRecord
from cluster.model.jobs import JobStatus
from cluster.store.postgres.rows import _record_from_params


@pytest.mark.parametrize("key", [None, "order-98213"])
def test_record_from_params_is_the_record_init_makes(key: str | None) -> None:
    now = datetime.now(UTC)
    p = CreateJobParams(
        id=uuid.uuid4(), owner="svc", type="order.cancel", run_at=now, scheduled_for=now,
        target={"kind": "HTTP", "url": "https://o.example/x"}, payload={"order": 1},
        max_attempts=3, timeout_seconds=30, idempotency_key=key, cron_id=uuid.uuid4(),
    )  # fmt: skip
    made = _record_from_params(p)
    expected = JobRecord(
        id=p.id, owner="svc", type="order.cancel", status=JobStatus.SCHEDULED, run_at=now,
        scheduled_for=now, attempt=0, max_attempts=3, timeout_seconds=30, target=p.target,
        payload=p.payload, idempotency_key=key, cron_id=p.cron_id,
    )  # fmt: skip
    assert type(made) is JobRecord
    assert made == expected
    # Every field is there (equality would not see a field both lack).
    for field in dataclasses.fields(JobRecord):
        assert getattr(made, field.name) == getattr(expected, field.name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.attempt = 1  # type: ignore[misc]
