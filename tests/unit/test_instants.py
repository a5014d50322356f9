"""cluster.instants: the one reading and writing of instants."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from cluster.instants import (
    EARLIEST,
    LATEST,
    format_instant,
    parse_instant,
    require_aware,
    utc,
)
from cluster.model import ClaimedJob
from cluster.targets import firing_body, idempotency_key


def test_utc_is_written_with_z_and_no_fraction_on_whole_seconds() -> None:
    assert format_instant(datetime(2026, 10, 23, 14, 30, tzinfo=UTC)) == "2026-10-23T14:30:00Z"


def test_microseconds_are_written_only_when_not_zero() -> None:
    # The bytes of a firing's scheduledFor: isoformat()'s, +00:00 as Z.
    for micro, text in [(1, ".000001"), (250_000, ".250000"), (999_999, ".999999")]:
        value = datetime(2031, 3, 4, 5, 6, 7, micro, tzinfo=UTC)
        assert format_instant(value) == f"2031-03-04T05:06:07{text}Z"
        assert format_instant(value) == value.isoformat().replace("+00:00", "Z")


def test_other_offsets_are_written_in_utc() -> None:
    kolkata = datetime(2026, 10, 23, 20, 0, 0, 500, tzinfo=ZoneInfo("Asia/Kolkata"))
    assert format_instant(kolkata) == "2026-10-23T14:30:00.000500Z"
    fixed = datetime(2026, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))
    assert format_instant(fixed) == "2025-12-31T23:30:00Z"
    # A UTC that is not the datetime.UTC object is still UTC.
    assert format_instant(datetime(2026, 1, 1, tzinfo=ZoneInfo("UTC"))) == "2026-01-01T00:00:00Z"
    assert format_instant(datetime(2026, 1, 1, tzinfo=timezone(timedelta(0)))) == "2026-01-01T00:00:00Z"


def test_a_firing_writes_scheduled_for_in_utc_whatever_the_session_zone() -> None:
    # psycopg hands out timestamptz in the database session's zone: a shard
    # whose server zone is Asia/Kolkata gives +05:30 instants. The firing's
    # scheduledFor and Idempotency-Key are the instant in UTC, as the API writes it.
    stored = datetime(2031, 3, 4, 10, 36, 7, 433447, tzinfo=ZoneInfo("Asia/Kolkata"))
    job = ClaimedJob(
        id=uuid.UUID("0190f3c2-a1b2-7abc-8123-456789abcdef"),
        attempt=2,
        max_attempts=5,
        type="t",
        scheduled_for=stored,
        run_at=stored,
        timeout_seconds=30,
        target={"kind": "NOOP"},
        payload_json="null",
        lease_until=stored,
    )
    body = json.loads(firing_body(job, "job_x"))
    assert body["scheduledFor"] == "2031-03-04T05:06:07.433447Z"
    assert idempotency_key(job, "job_x") == "job_x:2031-03-04T05:06:07.433447Z"


def test_naive_is_refused_everywhere() -> None:
    naive = datetime(2026, 10, 23, 14, 30)
    for call in (format_instant, utc, require_aware):
        with pytest.raises(ValueError, match="must carry a UTC offset"):
            call(naive)
    with pytest.raises(ValueError, match="runAt must carry a UTC offset, got naive"):
        require_aware(naive, "runAt")
    with pytest.raises(ValueError, match="runAt must be an RFC 3339 timestamp with an offset"):
        parse_instant("2026-10-23T14:30:00", "runAt")


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 10, 23, 14, 30, tzinfo=UTC),
        datetime(2026, 10, 23, 14, 30, 0, 1, tzinfo=UTC),
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(8999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    ],
)
def test_round_trip(value: datetime) -> None:
    text = format_instant(value)
    parsed = parse_instant(text)
    assert parsed == value and parsed.utcoffset() == timedelta(0)
    assert format_instant(parsed) == text


def test_parse_keeps_the_offset_and_reads_the_instant() -> None:
    parsed = parse_instant("2026-10-23T17:30:00+03:00")
    assert parsed.utcoffset() == timedelta(hours=3)
    assert utc(parsed) == datetime(2026, 10, 23, 14, 30, tzinfo=UTC)
    assert utc(parsed).tzinfo is UTC
    # Lower-case t and z, a space, nanoseconds (cut to microseconds).
    assert parse_instant("2026-10-23t14:30:00.123456789z") == datetime(
        2026, 10, 23, 14, 30, 0, 123456, tzinfo=UTC
    )
    assert parse_instant("2026-10-23 14:30:00-00:30") == datetime(2026, 10, 23, 15, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tomorrow", "t must be an RFC 3339 timestamp with an offset, e.g. 2026-10-23T14:30:00Z"),
        ("2026-02-30T00:00:00Z", "t is not a valid date and time: '2026-02-30T00:00:00Z'"),
        ("1969-12-31T23:59:59Z", "t must be from 1970-01-01T00:00:00Z and before 9000-01-01T00:00:00Z"),
        ("9000-01-01T00:00:00Z", "t must be from 1970-01-01T00:00:00Z and before 9000-01-01T00:00:00Z"),
    ],
)
def test_parse_refusals_name_the_field(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_instant(text, "t")
    assert str(info.value) == message


def test_parse_refuses_what_is_not_text() -> None:
    with pytest.raises(ValueError, match="when must be an RFC 3339 timestamp"):
        parse_instant(1234, "when")  # type: ignore[arg-type]


def test_bounds_are_utc() -> None:
    assert EARLIEST.tzinfo is UTC and LATEST.tzinfo is UTC and EARLIEST < LATEST
