"""The cron create path's fast makers (issue 41's API CPU per cron): each
must make exactly what the plain one made. A record filled through its
``__dict__`` equals the one ``__init__`` makes, with the same fields; the
fingerprint is the stored recipe's digest; a create body's definition reads
every field; the batch insert's arrays carry every column's values."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from cluster.model import CronDefinition, CronRecord
from cluster.model.columns import CRON_GIVEN
from cluster.services.cron_document import CreateCronIn, definition_of
from cluster.store.postgres_cron.rows import cron_columns

NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)

# Every field away from its default, instants, non-ASCII text and an
# integer past 64 bits (json's text, where orjson refuses it).
FULL = CronDefinition(
    name="report.daily",
    schedule="*/5 * * * *",
    time_zone="Europe/Istanbul",
    target={"kind": "HTTP", "url": "https://x.example/hook", "headers": {"X-A": "é"}},
    type="report",
    payload={"n": 2**70, "f": 0.5, "s": "ş"},
    misfire_policy="RUN_ALL",
    concurrency="FORBID",
    jitter_seconds=5,
    max_attempts=4,
    timeout_seconds=90,
    starting_deadline_seconds=120,
    enabled=False,
    month_end_policy="CLAMP",
    dst_policy="BOTH",
    start_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    end_at=None,
    max_runs=7,
)
PLAIN = CronDefinition(name="c", schedule="0 3 * * *", time_zone="UTC", target={"kind": "NOOP"})


def _recipe(d: CronDefinition) -> str:
    """The fingerprint as the API wrote it before the definition type."""
    values = d._asdict()
    defining = {
        k: values[k]
        for k in (
            "schedule", "time_zone", "type", "target", "payload", "misfire_policy",
            "concurrency", "jitter_seconds", "max_attempts", "timeout_seconds",
            "starting_deadline_seconds", "enabled",
        )
    }  # fmt: skip
    optional = {"month_end_policy": "SKIP", "dst_policy": "CRONIE", "start_at": None,
                "end_at": None, "max_runs": None}  # fmt: skip
    defining.update({k: values[k] for k, default in optional.items() if values[k] != default})
    return hashlib.sha256(json.dumps(defining, sort_keys=True, default=str).encode()).hexdigest()


def test_the_fingerprint_is_the_stored_recipe() -> None:
    # Digests written by f8a7f24's definition_fingerprint: stored ones must
    # still match, or every repeated create would turn into a 409.
    assert FULL.fingerprint() == "2ec2ed09d03db0f7ae36e919f8fce76f7fdf8bb345287617585744680bfbcea4"
    assert PLAIN.fingerprint() == "975d7da363ce14f010f8587981c185f23fd3bf7a3496db1c31d1b7d8ebd77804"
    for d in (FULL, PLAIN, FULL._replace(end_at=NOW, max_runs=None, enabled=True)):
        assert d.fingerprint() == _recipe(d)


def test_a_definitions_record_is_the_one_init_makes() -> None:
    for d in (FULL, PLAIN):
        cron_id = uuid.uuid4()
        made = d.record(id=cron_id, owner="svc", schedule_kind="CRON", anchor=NOW, next_fire_at=NOW)
        expected = CronRecord(
            **{**d._asdict(), "type": d.record_type},
            id=cron_id,
            owner="svc",
            schedule_kind="CRON",
            anchor=NOW,
            next_fire_at=NOW,
            fingerprint=d.fingerprint(),
        )
        assert made == expected
        assert vars(made) == vars(expected)  # the same fields, none missing, none extra
        assert made.type == (d.type or d.name)
        try:
            made.name = "other"  # type: ignore[misc]
        except dataclasses.FrozenInstanceError:
            pass
        else:
            raise AssertionError("a record made through its __dict__ is not frozen")


def test_a_row_with_state_makes_the_record_init_makes() -> None:
    record = FULL.record(
        id=uuid.uuid4(), owner="svc", schedule_kind="CRON", anchor=NOW, next_fire_at=NOW
    )
    state: dict[str, Any] = {
        "last_fire_at": NOW, "last_success_at": NOW, "missed_count": 2, "skipped_count": 3,
        "created_at": NOW, "updated_at": NOW, "run_count": 4, "paused_at": NOW,
        "pause_reason": "ops", "last_result": "FAILED", "last_result_at": NOW,
    }  # fmt: skip
    later = datetime(2026, 3, 5, tzinfo=UTC)
    row = {
        **{c.name: getattr(record, c.source) for c in CRON_GIVEN},
        **state,
        "recent_success_at": later,  # what the fold has not reached yet
        "recent_result": "SUCCEEDED",
        "recent_result_at": later,
    }
    made = CronRecord.from_row(row)
    expected = dataclasses.replace(
        record, **{**state, "last_success_at": later, "last_result": "SUCCEEDED",
                   "last_result_at": later},
    )  # fmt: skip
    assert made == expected
    assert vars(made) == vars(expected)


def test_a_create_body_states_every_field_of_its_definition() -> None:
    body = CreateCronIn.model_validate(
        {
            "name": FULL.name, "schedule": f"  {FULL.schedule} ", "timeZone": FULL.time_zone,
            "type": FULL.type, "target": FULL.target, "payload": FULL.payload,
            "misfirePolicy": FULL.misfire_policy, "concurrency": FULL.concurrency,
            "jitterSeconds": FULL.jitter_seconds, "maxAttempts": FULL.max_attempts,
            "timeoutSeconds": FULL.timeout_seconds,
            "startingDeadlineSeconds": FULL.starting_deadline_seconds, "enabled": FULL.enabled,
            "monthEndPolicy": FULL.month_end_policy, "dstPolicy": FULL.dst_policy,
            "startAt": "2026-01-02T06:04:05+03:00", "endAt": "2027-01-01T00:00:00Z",
            "maxRuns": FULL.max_runs,
        }
    )  # fmt: skip
    assert definition_of(body) == FULL._replace(end_at=datetime(2027, 1, 1, tzinfo=UTC))


def test_the_batch_arrays_carry_every_column_of_every_cron() -> None:
    records = [
        d.record(id=uuid.uuid4(), owner="svc", schedule_kind="CRON", anchor=NOW, next_fire_at=at)
        for d, at in ((FULL, NOW), (PLAIN, None), (PLAIN._replace(name="d", payload=[1]), NOW))
    ]
    arrays = cron_columns(records)
    assert list(arrays) == [c.name for c in CRON_GIVEN]
    for c in CRON_GIVEN:
        values = [getattr(r, c.source) for r in records]
        if c.sql_type == "jsonb":  # JSON text, which the statement's cast parses
            assert [json.loads(text) for text in arrays[c.name]] == values, c.name
        else:
            assert arrays[c.name] == values, c.name
    assert cron_columns([]) == {c.name: [] for c in CRON_GIVEN}
