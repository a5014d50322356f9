"""The HTTP API against real PostgreSQL shards (two), in process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from cluster.config import Settings
from cluster.model import ClaimParams
from cluster.processes import api_app
from cluster.store.postgres import PgStore
from tests.openapi_conformance import conformance_hooks

pytestmark = pytest.mark.integration

A = {"Authorization": "Bearer token-a"}
B = {"Authorization": "Bearer token-b"}
OP = {"Authorization": "Bearer token-op"}


def settings_for(dsns: list[str], **over: Any) -> Settings:
    base: dict[str, Any] = {
        "shards": dsns,
        "api_tokens": {"token-a": "svc-a", "token-b": "svc-b"},
        "operator_tokens": {"token-op": "ops"},
        "http_target_allow": ["hooks.example.com", ".internal.example", "10.1.0.0/16"],
        "max_payload_bytes": 1024,
    }
    base.update(over)
    return Settings(**base)


async def client_for(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = api_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api", event_hooks=conformance_hooks(app.openapi)
        ) as client:
            yield client


@pytest.fixture
async def api(shard_dsns: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    async for client in client_for(settings_for(shard_dsns)):
        yield client


def body(**over: Any) -> dict[str, Any]:
    run_at = (datetime.now(UTC) + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    out: dict[str, Any] = {
        "type": "ORDER_AUTO_CANCEL",
        "runAt": run_at,
        "target": {"kind": "HTTP", "url": "https://hooks.example.com/cancel"},
        "payload": {"orderId": 98213},
        "maxAttempts": 5,
        "timeoutSeconds": 60,
    }
    out.update(over)
    return out


def count_jobs(dsns: list[str]) -> int:
    total = 0
    for dsn in dsns:
        with psycopg.connect(dsn) as conn:
            for table in ("jobs", "jobs_far", "job_history", "job_keys"):
                row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                total += row[0] if row else 0
    return total


async def test_round_trip_on_two_shards(api: httpx.AsyncClient) -> None:
    shards = set()
    for _ in range(12):
        r = await api.post("/api/v1/jobs", json=body(), headers=A)
        assert r.status_code == 201, r.text
        created = r.json()
        assert created["status"] == "SCHEDULED" and created["jobId"].startswith("job_")
        g = await api.get(f"/api/v1/jobs/{created['jobId']}", headers=A)
        assert g.status_code == 200
        job = g.json()
        assert job["jobId"] == created["jobId"]
        assert job["payload"] == {"orderId": 98213}
        assert job["attempt"] == 0 and job["maxAttempts"] == 5 and job["attempts"] == []
        assert job["scheduledFor"] == job["runAt"]
        shards.add(job["shard"])
    assert shards == {0, 1}  # 12 random slots miss a shard with probability 2^-11


async def test_far_future_job_round_trip(api: httpx.AsyncClient, shard_dsns: list[str]) -> None:
    run_at = (datetime.now(UTC) + timedelta(days=40)).isoformat()
    r = await api.post("/api/v1/jobs", json=body(runAt=run_at), headers=A)
    assert r.status_code == 201
    jid = r.json()["jobId"]
    assert (await api.get(f"/api/v1/jobs/{jid}", headers=A)).json()["status"] == "SCHEDULED"
    p = await api.patch(f"/api/v1/jobs/{jid}", json={"runAt": "2031-01-01T00:00:00+03:00"}, headers=A)
    assert p.status_code == 200 and p.json()["runAt"].startswith("2030-12-31T21:00:00")
    d = await api.delete(f"/api/v1/jobs/{jid}", headers=A)
    assert d.status_code == 200 and d.json()["status"] == "CANCELLED"


async def test_concurrent_idempotent_repeats_across_api_instances(shard_dsns: list[str]) -> None:
    # Two API instances with their own pools stand for two API processes: the
    # database constraint, not the process, makes the repeat return the first job.
    settings = settings_for(shard_dsns)
    gens = [client_for(settings), client_for(settings)]
    clients = [await g.__anext__() for g in gens]
    try:
        same = body()
        headers = {**A, "Idempotency-Key": "order-98213-auto-cancel"}
        responses = await asyncio.gather(
            *(clients[i % 2].post("/api/v1/jobs", json=same, headers=headers) for i in range(20))
        )
    finally:
        for g in gens:
            with pytest.raises(StopAsyncIteration):
                await g.__anext__()
    # One creates; a repeat that meets it in flight in the same process is a
    # 409 (the Idempotency-Key draft), one that waits on the database's
    # unique index (the other process) is a replay of it.
    codes = sorted(r.status_code for r in responses)
    assert codes.count(201) == 1 and set(codes) <= {200, 201, 409}
    served = [r for r in responses if r.status_code in (200, 201)]
    assert len({r.json()["jobId"] for r in served}) == 1
    for r in responses:
        if r.status_code == 409:
            assert r.json()["type"] == "/problems/idempotency-key-in-flight"
        if r.status_code == 200:
            assert r.headers["Idempotent-Replayed"] == "true"
    with psycopg.connect(shard_dsns[0]) as c0, psycopg.connect(shard_dsns[1]) as c1:
        n = sum(c.execute("SELECT count(*) FROM jobs").fetchone()[0] for c in (c0, c1))  # type: ignore[index]
    assert n == 1


async def test_same_key_other_body_is_422(api: httpx.AsyncClient, shard_dsns: list[str]) -> None:
    # The Idempotency-Key draft: a key reused with another body is a 422.
    headers = {**A, "Idempotency-Key": "k-1"}
    assert (await api.post("/api/v1/jobs", json=body(), headers=headers)).status_code == 201
    before = count_jobs(shard_dsns)
    r = await api.post("/api/v1/jobs", json=body(payload={"orderId": 1}), headers=headers)
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["type"] == "/problems/idempotency-key-reused"
    assert "Idempotency-Key" in r.json()["detail"]
    assert count_jobs(shard_dsns) == before


async def test_keys_are_per_owner(api: httpx.AsyncClient) -> None:
    ra = await api.post("/api/v1/jobs", json=body(), headers={**A, "Idempotency-Key": "k"})
    rb = await api.post("/api/v1/jobs", json=body(), headers={**B, "Idempotency-Key": "k"})
    assert ra.status_code == rb.status_code == 201
    assert ra.json()["jobId"] != rb.json()["jobId"]


async def test_patch_and_delete_rules(api: httpx.AsyncClient, shard_dsns: list[str]) -> None:
    jid = (await api.post("/api/v1/jobs", json=body(), headers=A)).json()["jobId"]
    new_time = "2026-12-24T18:00:00+01:00"
    p = await api.patch(f"/api/v1/jobs/{jid}", json={"runAt": new_time}, headers=A)
    assert p.status_code == 200 and p.json()["runAt"].startswith("2026-12-24T17:00:00")
    # Make it due and claim it, as a worker would.
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    assert (await api.patch(f"/api/v1/jobs/{jid}", json={"runAt": past}, headers=A)).status_code == 200
    shard = (await api.get(f"/api/v1/jobs/{jid}", headers=A)).json()["shard"]
    store = PgStore(shard_dsns)
    await store.open()
    try:
        claimed = await store.claim_jobs(shard, ClaimParams("w", 10, 30, 0))
        assert len(claimed) == 1
    finally:
        await store.close()
    p = await api.patch(f"/api/v1/jobs/{jid}", json={"runAt": new_time}, headers=A)
    assert p.status_code == 409 and "RUNNING" in p.json()["detail"]
    d = await api.delete(f"/api/v1/jobs/{jid}", headers=A)
    assert d.status_code == 409
    # Cancelling before start works once; then the job is CANCELLED for good.
    jid2 = (await api.post("/api/v1/jobs", json=body(), headers=A)).json()["jobId"]
    d = await api.delete(f"/api/v1/jobs/{jid2}", headers=A)
    assert d.status_code == 200 and d.json()["status"] == "CANCELLED"
    assert (await api.delete(f"/api/v1/jobs/{jid2}", headers=A)).status_code == 409
    assert (await api.get(f"/api/v1/jobs/{jid2}", headers=A)).json()["status"] == "CANCELLED"


async def test_tenant_isolation(api: httpx.AsyncClient) -> None:
    jid = (await api.post("/api/v1/jobs", json=body(), headers=A)).json()["jobId"]
    for method, payload in (("GET", None), ("PATCH", {"runAt": "2030-01-01T00:00:00Z"}), ("DELETE", None)):
        r = await api.request(method, f"/api/v1/jobs/{jid}", headers=B, json=payload)
        assert r.status_code == 404, (method, r.text)
    assert (await api.get(f"/api/v1/jobs/{jid}", headers=A)).json()["status"] == "SCHEDULED"


async def test_unknown_and_malformed_ids_are_404(api: httpx.AsyncClient) -> None:
    assert (await api.get("/api/v1/jobs/job_01M8NDCRQPEVT9TKBNSP4S1NEN", headers=A)).status_code == 404
    r = await api.get("/api/v1/jobs/not-an-id", headers=A)
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")


BAD_BODIES: list[tuple[str, Any, int]] = [
    ("unknown field", body(maxAttempt=3), 422),
    ("naive runAt", body(runAt="2026-12-01T10:00:00"), 422),
    ("date only", body(runAt="2026-12-01"), 422),
    ("numeric runAt", body(runAt=1764000000), 422),
    ("impossible date", body(runAt="2026-02-30T10:00:00Z"), 422),
    ("maxAttempts 0", body(maxAttempts=0), 422),
    ("maxAttempts 101", body(maxAttempts=101), 422),
    ("timeout 0", body(timeoutSeconds=0), 422),
    ("timeout too long", body(timeoutSeconds=86401), 422),
    ("missing type", {k: v for k, v in body().items() if k != "type"}, 422),
    ("bad type", body(type="drop table; --"), 422),
    ("unknown target kind", body(target={"kind": "SMTP", "to": "x"}), 422),
    ("ftp url", body(target={"kind": "HTTP", "url": "ftp://hooks.example.com/x"}), 422),
    ("relative url", body(target={"kind": "HTTP", "url": "/cancel"}), 422),
    ("loopback", body(target={"kind": "HTTP", "url": "http://127.0.0.1:8080/x"}), 422),
    ("localhost", body(target={"kind": "HTTP", "url": "http://localhost/x"}), 422),
    ("metadata", body(target={"kind": "HTTP", "url": "http://169.254.169.254/latest"}), 422),
    ("ipv6 loopback", body(target={"kind": "HTTP", "url": "http://[::1]/x"}), 422),
    ("not allowed host", body(target={"kind": "HTTP", "url": "https://evil.example.org/x"}), 422),
    ("target extra field", body(target={"kind": "HTTP", "url": "https://hooks.example.com/", "x": 1}), 422),
    ("forbidden header", body(target={"kind": "HTTP", "url": "https://hooks.example.com/", "headers": {"Host": "x"}}), 422),
    ("noop disabled", body(target={"kind": "NOOP"}), 422),
    ("kafka not configured", body(target={"kind": "KAFKA", "topic": "orders"}), 422),
    ("payload too large", body(payload={"blob": "x" * 2000}), 413),
    ("not an object", ["a", "list"], 422),
]


@pytest.mark.parametrize(("case", "payload", "status"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
async def test_bad_input_is_4xx_problem_and_stores_nothing(
    api: httpx.AsyncClient, shard_dsns: list[str], case: str, payload: Any, status: int
) -> None:
    before = count_jobs(shard_dsns)
    r = await api.post("/api/v1/jobs", json=payload, headers={**A, "Idempotency-Key": f"bad-{case}"})
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["status"] == status and problem["detail"]
    assert count_jobs(shard_dsns) == before


async def test_malformed_json_is_400(api: httpx.AsyncClient, shard_dsns: list[str]) -> None:
    before = count_jobs(shard_dsns)
    r = await api.post(
        "/api/v1/jobs", content=b'{"type": ', headers={**A, "Content-Type": "application/json"}
    )
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/problem+json")
    assert count_jobs(shard_dsns) == before


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic dXNlcjpwdw=="}, {"Authorization": "Bearer "}],
)
async def test_auth_required(api: httpx.AsyncClient, shard_dsns: list[str], headers: dict[str, str]) -> None:
    before = count_jobs(shard_dsns)
    r = await api.post("/api/v1/jobs", json=body(), headers=headers)
    assert r.status_code == 401 and r.headers["content-type"].startswith("application/problem+json")
    assert count_jobs(shard_dsns) == before


async def test_long_idempotency_key_refused(api: httpx.AsyncClient) -> None:
    r = await api.post("/api/v1/jobs", json=body(), headers={**A, "Idempotency-Key": "k" * 201})
    assert r.status_code == 422


async def test_private_targets_allowed_by_operator(shard_dsns: list[str]) -> None:
    settings = settings_for(shard_dsns, allow_private_targets=True, http_target_allow=[])
    async for client in client_for(settings):
        ok = body(target={"kind": "HTTP", "url": "http://127.0.0.1:9/x"})
        assert (await client.post("/api/v1/jobs", json=ok, headers=A)).status_code == 201
        meta = body(target={"kind": "HTTP", "url": "http://169.254.169.254/"})
        assert (await client.post("/api/v1/jobs", json=meta, headers=A)).status_code == 422


async def test_cidr_allow_list(api: httpx.AsyncClient) -> None:
    ok = body(target={"kind": "HTTP", "url": "http://10.1.2.3/hook"})
    assert (await api.post("/api/v1/jobs", json=ok, headers=A)).status_code == 201
    no = body(target={"kind": "HTTP", "url": "http://10.2.0.1/hook"})
    assert (await api.post("/api/v1/jobs", json=no, headers=A)).status_code == 422


async def test_openapi_and_ops_endpoints(api: httpx.AsyncClient) -> None:
    spec = (await api.get("/openapi.json")).json()
    assert "/api/v1/jobs" in spec["paths"] and "/api/v1/jobs/{job_id}" in spec["paths"]
    assert (await api.get("/healthz")).status_code == 200
    ready = await api.get("/readyz")
    assert ready.status_code == 503  # migrated, but no worker polls yet
    assert all(s["migrated"] and s["workers"] == 0 for s in ready.json()["shards"])
    metrics = (await api.get("/metrics", headers=OP)).text
    assert "vakit_api_requests_total" in metrics


async def test_overload_is_429_with_retry_after(shard_dsns: list[str]) -> None:
    settings = settings_for(shard_dsns, api_max_concurrency=2)
    app = api_app(settings)
    store = app.state.ctx.store
    gate = asyncio.Event()
    real_get = store.get_job

    async def slow_get(*args: Any, **kwargs: Any) -> Any:
        await gate.wait()  # hold the request in flight
        return await real_get(*args, **kwargs)

    store.get_job = slow_get
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api", event_hooks=conformance_hooks(app.openapi)
        ) as client:
            jid = (await client.post("/api/v1/jobs", json=body(), headers=A)).json()["jobId"]
            held = [asyncio.create_task(client.get(f"/api/v1/jobs/{jid}", headers=A)) for _ in range(2)]
            await asyncio.sleep(0.1)
            before = count_jobs(shard_dsns)
            r = await client.post("/api/v1/jobs", json=body(), headers=A)
            assert r.status_code == 429 and r.headers["Retry-After"] == "1"
            assert r.headers["content-type"].startswith("application/problem+json")
            assert count_jobs(shard_dsns) == before
            gate.set()
            assert [t.status_code for t in await asyncio.gather(*held)] == [200, 200]
            assert (await client.post("/api/v1/jobs", json=body(), headers=A)).status_code == 201
