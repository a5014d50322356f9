"""What the OpenAPI document says of a value is what the server's code
checks of it (issue 47): each pattern or enum against the function that
decides, on values drawn to land on both sides of it. The live API is
fuzzed from the document in tests/integration/test_api_fuzz.py."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardmap
from cluster.api.calendar_schemas import CALENDAR_DAY
from cluster.api.openapi_exact import ID_PATTERNS, SCHEDULE_PATTERN
from cluster.cron.schedule import InvalidSchedule, load_zone, parse_schedule, zone_names
from cluster.instants import INSTANT_PATTERN, parse_instant
from tests.unit.test_api_fast import A, serve
from tests.unit.test_api_fast import settings as api_settings

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyzilo"


def _decodes(prefix: str, text: str) -> bool:
    try:
        shardmap.decode_id(prefix, text)
    except ValueError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    digits=st.text(alphabet=_ALPHABET, min_size=24, max_size=28),
    value=st.integers(min_value=0, max_value=2**128 - 1),
)
def test_an_id_matches_the_pattern_exactly_when_it_decodes(digits: str, value: int) -> None:
    for prefix in ("job", "cron"):
        pattern = re.compile(ID_PATTERNS[prefix])
        made = shardmap.encode_id(prefix, shardmap.new_uuid())
        assert pattern.fullmatch(made) and pattern.fullmatch(made.lower())
        for text in (f"{prefix}_{digits}", shardmap.encode_id(prefix, uuid.UUID(int=value))):
            assert bool(pattern.fullmatch(text)) == _decodes(prefix, text), text


def _parses(text: str) -> bool:
    try:
        parse_instant(text, "t")
    except ValueError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    when=st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    minutes=st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1),
    sep=st.sampled_from(["T", "t", " "]),
)
def test_an_instant_matches_the_pattern_only_when_it_parses(
    when: datetime, minutes: int, sep: str
) -> None:
    text = when.replace(tzinfo=timezone(timedelta(minutes=minutes))).isoformat(sep=sep)
    if re.fullmatch(INSTANT_PATTERN, text):
        assert _parses(text), text
    elif sep != " " and _parses(text):
        # Refused by its written date alone (the only instants the pattern
        # gives up): the date is within the bounds, in UTC and as written.
        local = text[:10]
        assert (local in ("1970-01-01", "9000-01-01") and minutes > 0) or (
            local in ("8999-12-31", "1969-12-31") and minutes < 0
        ), text


@settings(max_examples=200, deadline=None)
@given(text=st.from_regex(INSTANT_PATTERN, fullmatch=True))
def test_every_text_the_pattern_allows_parses_unless_its_day_does_not_exist(text: str) -> None:
    try:
        parse_instant(text, "t")
    except ValueError as exc:
        assert "is not a valid date and time" in str(exc)
        day, month = int(text[8:10]), int(text[5:7])
        assert day > 28 and (month == 2 or day == 31), text


def test_the_bounds_of_the_instant_pattern() -> None:
    allowed = ["1970-01-01T00:00:00Z", "1970-01-01T00:00:00-05:00", "8999-12-31T23:59:59+05:00"]
    refused = [
        "1969-12-31T23:59:59Z", "9000-01-01T00:00:00Z", "1970-01-01T06:00:00+05:00",
        "8999-12-31T10:00:00-05:00", "2026-01-01 10:00:00Z", "2026-01-01T10:00:00",
        "2026-01-01T24:00:00Z", "٢٠٢٦-01-01T10:00:00Z",
    ]  # fmt: skip
    for text in allowed:
        assert re.fullmatch(INSTANT_PATTERN, text) and _parses(text), text
    for text in refused:
        assert not re.fullmatch(INSTANT_PATTERN, text), text
    assert all(_parses(t) for t in refused[2:5])  # what the server now refuses by the text


def test_the_time_zone_enum_is_what_the_schedule_accepts() -> None:
    names = zone_names()
    assert "Europe/Istanbul" in names and "UTC" in names and len(names) > 300
    for name in names:
        load_zone(name)
    for name in ("europe/istanbul", "Mars/Olympus", "localtime", "posix/UTC", "Factory"):
        assert name not in names
        with pytest.raises(InvalidSchedule):
            load_zone(name)


@pytest.mark.parametrize(
    "schedule",
    [
        "0 2 * * *", "*/15 * * * *", "0 9 * * MON-FRI", "30 1 L * *", "H H(0-5) * * *",
        "0 0 1,15 JAN,JUL *", "0 12 * * 5#2", "0 0 LW * *", "@daily", "@Hourly", " @weekly ",
        "every 15m", "EVERY 1h30m fixed-delay", "every 90s fixed-rate", "0\t3 * * *",
    ],
)  # fmt: skip
def test_a_schedule_the_parser_accepts_matches_the_grammar_pattern(schedule: str) -> None:
    parse_schedule(schedule, "UTC", seed="cron")
    assert re.fullmatch(SCHEDULE_PATTERN, schedule)


@pytest.mark.parametrize(
    "schedule",
    ["0 2 * *", "0 2 * * * *", "@fortnightly", "every", "every 15", "0 2 ? * *", "é * * * *"],
)
def test_a_schedule_off_the_grammar_is_refused_by_both(schedule: str) -> None:
    assert not re.fullmatch(SCHEDULE_PATTERN, schedule)
    with pytest.raises(InvalidSchedule):
        parse_schedule(schedule, "UTC", seed="cron")


def test_calendar_days_are_from_1900_to_2200() -> None:
    for day in ("1900-01-01", "2200-12-31", "2027-04-23"):
        assert re.fullmatch(CALENDAR_DAY, day)
    for day in ("1899-12-31", "2201-01-01", "2027-W01-1", "20270101", "27-1-1"):
        assert not re.fullmatch(CALENDAR_DAY, day)


@pytest.fixture
async def api() -> AsyncIterator[httpx.AsyncClient]:
    from cluster.api.app import create_app
    from cluster.store.memory import MemStore
    from cluster.store.memory_cron import MemCronStore

    store = MemStore(2)
    async for client in serve(create_app(api_settings(), store=store, crons=MemCronStore(store))):
        yield client


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("OPTIONS", "/api/v1/jobs", "GET, POST"),
        ("PUT", "/api/v1/jobs/job_x", "GET, PATCH, DELETE"),
        ("OPTIONS", "/api/v1/cron-jobs/cron_x", "GET, PATCH, DELETE"),
        ("DELETE", "/api/v1/calendars", "GET, POST"),
        ("POST", "/api/v1/calendars/tr", "GET, PUT, DELETE"),
    ],
)
async def test_a_405_allows_every_method_of_its_path(
    api: httpx.AsyncClient, method: str, path: str, allow: str
) -> None:
    got = await api.request(method, path, headers=A)
    assert got.status_code == 405 and got.headers["allow"] == allow
    assert got.json()["type"] == "/problems/method-not-allowed"


async def test_the_messages_of_the_published_patterns(api: httpx.AsyncClient) -> None:
    body: dict[str, Any] = {
        "type": "t", "runAt": "2026-12-01 10:00:00Z", "target": {"kind": "HTTP", "url": "https://a.example/"},
    }  # fmt: skip
    got = (await api.post("/api/v1/jobs", json=body, headers=A)).json()
    assert got["detail"].startswith("runAt: must be an RFC 3339 timestamp with a T and an offset")


def test_the_document_says_each_rule_where_it_applies() -> None:
    from cluster.api.app import create_app
    from cluster.store.memory import MemStore
    from cluster.store.memory_cron import MemCronStore

    store = MemStore(2)
    spec = create_app(api_settings(), store=store, crons=MemCronStore(store)).openapi()
    search = {p["name"]: p["schema"] for p in spec["paths"]["/api/v1/jobs"]["get"]["parameters"]}
    instant = search["runAtFrom"]["anyOf"][0]
    assert instant["pattern"] == INSTANT_PATTERN and instant["format"] == "date-time"
    assert search["cursor"]["anyOf"][0]["pattern"].startswith("^(?:job_")
    schemas = spec["components"]["schemas"]
    assert schemas["CreateCronIn"]["properties"]["timeZone"] == {
        "$ref": "#/components/schemas/TimeZone"
    }
    assert schemas["TimeZone"]["enum"] == zone_names()
    assert schemas["CreateCronIn"]["properties"]["schedule"]["pattern"] == SCHEDULE_PATTERN
    cancel = schemas["BulkCancelIn"]["properties"]["status"]["anyOf"][0]
    assert cancel["items"]["const"] == "SCHEDULED" and cancel["maxItems"] == 1
    assert "null" not in str(schemas["PatchCronIn"]["properties"]["schedule"])
    assert (
        "422" in spec["paths"]["/api/v1/cluster"]["get"]["responses"]
    )  # an unknown query parameter
    link = spec["paths"]["/api/v1/jobs"]["post"]["responses"]["201"]["links"]["retryJob"]
    assert link["parameters"] == {"job_id": "$response.body#/jobId"}
