"""Hostile input against the API on real PostgreSQL shards: every refusal is a
4xx problem+json that changes nothing and logs no byte of what was sent.

Each case once reached the database or a ``datetime`` overflow and came back
as a 500 whose log line quoted the payload (issue 11)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.integration.test_api import A, body, client_for, count_jobs, settings_for

pytestmark = pytest.mark.integration

# Put in every hostile body: no log line may carry it.
MARK = "FRAGMENT-7f3a9c"
JSON = {**A, "Content-Type": "application/json"}


def m(text: str) -> str:
    """``text`` with ``@`` replaced by the mark."""
    return text.replace("@", MARK)


def raw_body(payload: str, run_at: str = "2030-01-01T00:00:00Z") -> bytes:
    """A create body with ``payload`` spliced in as raw JSON text."""
    return (
        '{"type":"T","runAt":"' + run_at + '","target":{"kind":"HTTP",'
        '"url":"https://hooks.example.com/x"},"payload":' + payload + "}"
    ).encode()


# (case, raw body, status): the raw JSON text a client can send.
RAW_CREATES: list[tuple[str, bytes, int]] = [
    ("NaN", raw_body(m('{"m":"@","v":NaN}')), 400),
    ("Infinity", raw_body(m('{"m":"@","v":Infinity}')), 400),
    ("-Infinity", raw_body(m('{"m":"@","v":-Infinity}')), 400),
    ("1e999", raw_body(m('{"m":"@","v":1e999}')), 422),
    ("-1e999", raw_body(m('{"m":"@","v":-1e999}')), 422),
    ("integer beyond a double", raw_body(m('{"m":"@","v":' + "9" * 400 + "}")), 422),
    ("NUL in a string", raw_body(m('{"m":"@\\u0000"}')), 422),
    ("NUL in a key", raw_body(m('{"@\\u0000":1}')), 422),
    ("NUL in a list", raw_body(m('["@", "a\\u0000"]')), 422),
    ("lone high surrogate", raw_body(m('{"m":"@\\ud800"}')), 422),
    ("lone low surrogate", raw_body(m('{"m":"@\\udc00x"}')), 422),
    ("reversed pair", raw_body(m('{"m":"@\\udc00\\ud800"}')), 422),
    ("raw NUL byte", raw_body(m('{"m":"@\x00"}')), 400),
    ("not UTF-8", raw_body(m('{"m":"@"}')).replace(b"FRAGMENT", b"FR\xffAGMENT"), 400),
    ("NUL in the type", raw_body(m('{"m":"@"}')).replace(b'"T"', b'"T\\u0000"'), 422),
    ("NUL in the URL", raw_body(m('{"m":"@"}')).replace(b"/x", b"/x\\u0000"), 422),
    ("year 1 with an offset", raw_body(m('{"m":"@"}'), "0001-01-01T00:30:00+01:00"), 422),
    ("year 9999 with an offset", raw_body(m('{"m":"@"}'), "9999-12-31T23:30:00-01:00"), 422),
    ("year 9999 in UTC", raw_body(m('{"m":"@"}'), "9999-12-31T23:59:59Z"), 422),
    ("before 1970", raw_body(m('{"m":"@"}'), "1969-12-31T23:59:59Z"), 422),
    ("deeply nested", raw_body("[" * 5000 + "]" * 5000), 400),
]
# What is fine although it looks close: it must still be accepted.
RAW_ACCEPTED: list[tuple[str, bytes]] = [
    ("surrogate pair", raw_body('{"m":"\\ud83d\\ude00"}')),
    ("NaN as a string", raw_body('{"NaN":"Infinity","e":"1e999"}')),
    ("escaped backslash before u0000", raw_body('{"m":"\\\\u0000"}')),
    ("large finite", raw_body('{"v":1.7e308,"i":' + "9" * 300 + "}")),
]


@pytest.fixture(scope="module")
def module_dsns(pg_servers: Any) -> Any:
    # One pair of shard databases for the module: every case checks that
    # nothing changed, which holds whatever the earlier cases left.
    from tests.pgfixtures import clone_databases, drop_databases

    dsns = clone_databases(pg_servers)
    yield dsns
    drop_databases(dsns)


@pytest.fixture
async def api(module_dsns: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    async for client in client_for(settings_for(module_dsns)):
        yield client


def assert_refused(r: httpx.Response, status: int, caplog: pytest.LogCaptureFixture) -> None:
    assert r.status_code == status, r.text[:500]
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["status"] == status and problem["detail"]
    assert problem["type"].startswith("/problems/")
    assert MARK not in caplog.text
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]


@pytest.mark.parametrize(("case", "raw", "status"), RAW_CREATES, ids=[c[0] for c in RAW_CREATES])
async def test_hostile_create_is_refused_and_changes_nothing(
    api: httpx.AsyncClient,
    module_dsns: list[str],
    caplog: pytest.LogCaptureFixture,
    case: str,
    raw: bytes,
    status: int,
) -> None:
    before = count_jobs(module_dsns)
    for headers in (JSON, {**JSON, "Idempotency-Key": f"hostile-{case}"}):
        r = await api.post("/api/v1/jobs", content=raw, headers=headers)
        assert_refused(r, status, caplog)
        batch = b'{"jobs":[' + raw + b"]}"
        r = await api.post("/api/v1/jobs:batch", content=batch, headers=headers)
        if r.status_code == 200:  # refused as an item of the batch, on its own
            assert [x["status"] for x in r.json()["results"]] == [status]
            assert r.json()["results"][0]["problem"]["type"].startswith("/problems/")
        else:  # refused as a whole: the body breaks the strict JSON rules
            assert_refused(r, status, caplog)
    assert count_jobs(module_dsns) == before


@pytest.mark.parametrize(("case", "raw"), RAW_ACCEPTED, ids=[c[0] for c in RAW_ACCEPTED])
async def test_strict_rules_refuse_no_valid_body(
    api: httpx.AsyncClient, caplog: pytest.LogCaptureFixture, case: str, raw: bytes
) -> None:
    r = await api.post("/api/v1/jobs", content=raw, headers=JSON)
    assert r.status_code == 201, r.text
    job = (await api.get(f"/api/v1/jobs/{r.json()['jobId']}", headers=A)).json()
    assert job["payload"] is not None
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]


BAD_INSTANTS = [
    "0001-01-01T00:30:00+01:00",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:30:00-01:00",
    "9999-12-31T23:59:59.999999Z",
    "1969-12-31T23:59:59Z",
]


async def test_patch_with_unbounded_instants_is_422(
    api: httpx.AsyncClient, module_dsns: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    created = await api.post("/api/v1/jobs", json=body(), headers=A)
    jid = created.json()["jobId"]
    run_at = (await api.get(f"/api/v1/jobs/{jid}", headers=A)).json()["runAt"]
    for when in BAD_INSTANTS:
        r = await api.patch(f"/api/v1/jobs/{jid}", json={"runAt": when}, headers=A)
        assert_refused(r, 422, caplog)
    nul = b'{"runAt":"2030-01-01T00:00:00Z","x":"\\u0000"}'
    assert_refused(await api.patch(f"/api/v1/jobs/{jid}", content=nul, headers=JSON), 422, caplog)
    assert (await api.get(f"/api/v1/jobs/{jid}", headers=A)).json()["runAt"] == run_at


async def test_cron_inputs_near_the_ends_of_time_are_422(
    api: httpx.AsyncClient, module_dsns: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    cron = {
        "name": "yearly",
        "schedule": "@yearly",
        "timeZone": "UTC",
        "target": {"kind": "HTTP", "url": "https://hooks.example.com/y"},
    }
    created = await api.post("/api/v1/cron-jobs", json=cron, headers=A)
    assert created.status_code in (200, 201), created.text
    cid = created.json()["cronJobId"]
    for when in BAD_INSTANTS:
        r = await api.get(f"/api/v1/cron-jobs/{cid}/preview", params={"from": when}, headers=A)
        assert_refused(r, 422, caplog)
    # The latest `from` and the largest count of yearly slots still end in
    # year 9999, the last a datetime holds.
    late = {"from": "8999-12-31T23:59:59Z", "count": "1000"}
    ok = await api.get(f"/api/v1/cron-jobs/{cid}/preview", params=late, headers=A)
    assert ok.status_code == 200
    assert ok.json()["fires"][-1]["scheduledFor"] == "9999-01-01T00:00:00Z"
    before = count_jobs(module_dsns)
    for bad in (
        {**cron, "name": "nul-zone", "timeZone": "Europe/Berlin\u0000"},
        {**cron, "name": "nul-schedule", "schedule": "@yearly\u0000"},
    ):
        r = await api.post("/api/v1/cron-jobs", json=bad, headers=A)
        assert r.status_code in (400, 422)
        assert_refused(r, r.status_code, caplog)
    for raw in (b'"payload":{"v":NaN}', rb'"payload":{"v":"\\u0000","w":"\u0000"}'):
        text = b'{"name":"raw","schedule":"@daily","timeZone":"UTC","target":{"kind":"NOOP"},' + raw + b"}"
        r = await api.post("/api/v1/cron-jobs", content=text, headers=JSON)
        assert r.status_code in (400, 422)
        assert_refused(r, r.status_code, caplog)
    patch = b'{"payload":{"v":1e999}}'
    assert_refused(await api.patch(f"/api/v1/cron-jobs/{cid}", content=patch, headers=JSON), 422, caplog)
    # A NUL in a query string would reach a text column: refused before.
    r = await api.get("/api/v1/cron-jobs", params={"after": f"{MARK}\u0000"}, headers=A)
    assert_refused(r, 422, caplog)
    assert count_jobs(module_dsns) == before
    after = (await api.get(f"/api/v1/cron-jobs/{cid}", headers=A)).json()
    assert after["payload"] is None and after["schedule"] == "@yearly"


async def test_chunked_body_is_refused_past_the_limit_without_reading_it(
    api: httpx.AsyncClient, module_dsns: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    # A body without Content-Length, sent in 64 KiB chunks: 64 MB if read
    # whole. The limit here is 1 KiB of payload + 16 KiB of envelope.
    sent = 0
    chunk = b"x" * 65536

    async def stream() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"type":"T","payload":"'
        for _ in range(1024):
            sent += 1
            yield chunk

    before = count_jobs(module_dsns)
    for path in ("/api/v1/jobs", "/api/v1/jobs:batch", "/api/v1/cron-jobs"):
        sent = 0
        r = await api.post(path, content=stream(), headers=JSON)
        assert_refused(r, 413, caplog)
        assert r.json()["type"] == "/problems/payload-too-large"
        # Refused on the chunk that crossed the limit (16 MiB for a batch):
        # the rest was never read.
        assert sent <= 16 * 1024 * 1024 // len(chunk) + 1
    assert count_jobs(module_dsns) == before


async def test_a_batch_job_without_a_payload_is_stored_with_a_null_payload(
    api: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by the fuzz run: a JSON null payload became SQL NULL in the
    # batch statement, a 500 for every job of that shard's part.
    jobs = [body(payload=None), {k: v for k, v in body().items() if k != "payload"}, body()]
    r = await api.post("/api/v1/jobs:batch", json={"jobs": jobs}, headers=A)
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["status"] for x in results] == [201, 201, 201], results
    for x, sent in zip(results, jobs, strict=True):
        job = (await api.get(f"/api/v1/jobs/{x['jobId']}", headers=A)).json()
        assert job["payload"] == sent.get("payload")
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
