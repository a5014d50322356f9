"""The API on the in-memory stores, in process: the fast tier.

The same application the integration tests run on PostgreSQL, here on
MemStore and MemCronStore through httpx's ASGI transport: auth, the job
routes, idempotency, the problem+json shapes, the error table and batch
create. No server is started.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from cluster.api.app import create_app
from cluster.api.problems import KINDS, kind_of, problem_for
from cluster.config import Settings
from cluster.cron.schedule import InvalidSchedule
from cluster.errors import (
    Conflict,
    CoordinationUnavailable,
    InvalidRequest,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    ShardUnavailable,
    StoreError,
    Unauthorized,
    VakitError,
)
from cluster.model import CreateJobsParams, CreateResult, GetJobParams
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from tests.openapi_conformance import conformance_hooks

A = {"Authorization": "Bearer token-a"}
B = {"Authorization": "Bearer token-b"}
OP = {"Authorization": "Bearer token-op"}
PROBLEM = "application/problem+json"


def settings(**over: Any) -> Settings:
    base: dict[str, Any] = {
        "shards": ["mem-0", "mem-1"],
        "api_tokens": {"token-a": "svc-a", "token-b": "svc-b"},
        "operator_tokens": {"token-op": "ops"},
        "http_target_allow": ["hooks.example.com"],
        "max_payload_bytes": 1024,
    }
    base.update(over)
    return Settings(**base)


class FlakyShardStore(MemStore):
    """A MemStore whose shard ``down`` answers every write as unavailable."""

    down: int | None = None

    async def create_jobs(self, shard: int, params: CreateJobsParams) -> list[CreateResult | Conflict]:
        if shard == self.down:
            raise ShardUnavailable(f"shard {shard} is unavailable: test", shard=shard)
        return await super().create_jobs(shard, params)


async def serve(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api", event_hooks=conformance_hooks(app.openapi)
        ) as client:
            yield client


@pytest.fixture
def store() -> FlakyShardStore:
    return FlakyShardStore(2)


@pytest.fixture
async def api(store: FlakyShardStore) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings(), store=store, crons=MemCronStore(store))
    async for client in serve(app):
        yield client


# One instant for every body: a repeat must be the same request.
RUN_AT = (datetime.now(UTC) + timedelta(days=1)).isoformat().replace("+00:00", "Z")


def body(**over: Any) -> dict[str, Any]:
    run_at = RUN_AT
    out: dict[str, Any] = {
        "type": "ORDER_AUTO_CANCEL",
        "runAt": run_at,
        "target": {"kind": "HTTP", "url": "https://hooks.example.com/cancel"},
        "payload": {"orderId": 98213},
    }
    out.update(over)
    return out


def assert_problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    problem: dict[str, Any] = r.json()
    assert problem["status"] == status
    assert problem["type"] in {k.type for k in KINDS.values() if k.status == status}
    assert problem["title"] and problem["detail"]
    return problem


# -- auth ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic dXNlcjpwdw=="}, {"Authorization": "Bearer "}],
)
async def test_auth_is_required_on_every_api_route(
    api: httpx.AsyncClient, store: MemStore, headers: dict[str, str]
) -> None:
    for method, url, payload in (
        ("POST", "/api/v1/jobs", body()),
        ("POST", "/api/v1/jobs:batch", {"jobs": [body()]}),
        ("GET", "/api/v1/jobs/job_01M8NDCRQPEVT9TKBNSP4S1NEN", None),
        ("GET", "/api/v1/cluster", None),
        ("POST", "/api/v1/cron-jobs:batch", {"cronJobs": [{"name": "x"}]}),
    ):
        r = await api.request(method, url, json=payload, headers=headers)
        assert_problem(r, 401)
        assert r.headers["WWW-Authenticate"] == "Bearer"
    assert all(not s.rows for s in store._shards)


# -- jobs ------------------------------------------------------------------------


async def test_create_get_patch_delete(api: httpx.AsyncClient) -> None:
    r = await api.post("/api/v1/jobs", json=body(), headers=A)
    assert r.status_code == 201 and r.headers["content-type"] == "application/json"
    created = r.json()
    assert set(created) == {"jobId", "status"} and created["status"] == "SCHEDULED"
    jid = created["jobId"]
    job = (await api.get(f"/api/v1/jobs/{jid}", headers=A)).json()
    assert job["payload"] == {"orderId": 98213} and job["maxAttempts"] == 5
    assert job["target"] == {"kind": "HTTP", "url": "https://hooks.example.com/cancel"}
    p = await api.patch(f"/api/v1/jobs/{jid}", json={"runAt": "2031-01-01T00:00:00+03:00"}, headers=A)
    assert p.status_code == 200 and p.json()["runAt"] == "2030-12-31T21:00:00Z"
    d = await api.delete(f"/api/v1/jobs/{jid}", headers=A)
    assert d.status_code == 200 and d.json()["status"] == "CANCELLED"
    again = assert_problem(await api.delete(f"/api/v1/jobs/{jid}", headers=A), 409)
    assert "CANCELLED" in again["detail"]
    # Another owner sees nothing of it.
    assert_problem(await api.get(f"/api/v1/jobs/{jid}", headers=B), 404)


async def test_idempotent_repeat_and_conflict(api: httpx.AsyncClient, store: MemStore) -> None:
    headers = {**A, "Idempotency-Key": "order-98213"}
    first = await api.post("/api/v1/jobs", json=body(), headers=headers)
    repeat = await api.post("/api/v1/jobs", json=body(), headers=headers)
    assert (first.status_code, repeat.status_code) == (201, 200)
    assert first.json() == repeat.json()
    # The Idempotency-Key draft: a replay says so, a reuse with another body is a 422.
    assert repeat.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    other = assert_problem(
        await api.post("/api/v1/jobs", json=body(payload={"orderId": 1}), headers=headers), 422
    )
    assert "Idempotency-Key" in other["detail"]
    assert other["type"] == "/problems/idempotency-key-reused"
    # The key is per owner: B's same key is B's own job.
    b = await api.post("/api/v1/jobs", json=body(), headers={**B, "Idempotency-Key": "order-98213"})
    assert b.status_code == 201 and b.json()["jobId"] != first.json()["jobId"]
    assert sum(len(s.rows) for s in store._shards) == 2


async def test_a_repeat_is_the_same_instant_however_it_is_written(
    api: httpx.AsyncClient, store: MemStore
) -> None:
    headers = {**A, "Idempotency-Key": "same-instant"}
    first = await api.post("/api/v1/jobs", json=body(runAt="2031-05-04T09:30:00Z"), headers=headers)
    assert first.status_code == 201, first.text
    spellings = ("2031-05-04T12:30:00+03:00", "2031-05-04T09:30:00.000+00:00", "2031-05-04T04:00:00-05:30")
    for spelling in spellings:
        repeat = await api.post("/api/v1/jobs", json=body(runAt=spelling), headers=headers)
        assert repeat.status_code == 200, (spelling, repeat.text)
        assert repeat.json()["jobId"] == first.json()["jobId"]
    # Another instant under the key is another request.
    moved = await api.post("/api/v1/jobs", json=body(runAt="2031-05-04T09:31:00Z"), headers=headers)
    assert_problem(moved, 422)  # the Idempotency-Key draft: reuse is a 422
    assert sum(len(s.rows) for s in store._shards) == 1


async def test_problem_shapes(api: httpx.AsyncClient, store: MemStore) -> None:
    invalid = assert_problem(await api.post("/api/v1/jobs", json=body(maxAttempts=0), headers=A), 422)
    assert invalid["title"] == "Invalid request" and invalid["detail"].startswith("maxAttempts: ")
    assert invalid["errors"][0]["field"] == "maxAttempts"
    naive = assert_problem(await api.post("/api/v1/jobs", json=body(runAt="2026-12-01T10:00:00"), headers=A), 422)
    assert "RFC 3339" in naive["detail"]
    malformed = await api.post(
        "/api/v1/jobs", content=b'{"type": ', headers={**A, "Content-Type": "application/json"}
    )
    assert assert_problem(malformed, 400)["title"] == "Malformed JSON"
    large = assert_problem(await api.post("/api/v1/jobs", json=body(payload={"x": "y" * 2000}), headers=A), 413)
    assert large["title"] == "Payload too large" and large["field"] == "payload"
    refused = assert_problem(
        await api.post("/api/v1/jobs", json=body(target={"kind": "HTTP", "url": "http://127.0.0.1/"}), headers=A),
        422,
    )
    assert refused["field"] == "target.url"
    key = assert_problem(await api.post("/api/v1/jobs", json=body(), headers={**A, "Idempotency-Key": ""}), 422)
    assert "Idempotency-Key" in key["detail"]
    assert_problem(await api.get("/api/v1/jobs/not-an-id", headers=A), 404)
    assert_problem(await api.get("/api/v1/nothing-here", headers=A), 404)
    # A body sent without a JSON content type takes FastAPI's own path, and
    # still leaves as a problem.
    text = await api.post("/api/v1/jobs", content=json.dumps(body()), headers={**A, "Content-Type": "text/plain"})
    assert_problem(text, 422)
    assert all(not s.rows for s in store._shards)


async def test_request_body_over_the_limit_is_refused_before_reading(api: httpx.AsyncClient) -> None:
    huge = json.dumps(body(payload={"x": "y" * 40_000}))
    assert_problem(await api.post("/api/v1/jobs", content=huge, headers={**A, "Content-Type": "application/json"}), 413)


async def test_a_store_error_is_a_generic_500(store: MemStore) -> None:
    async def broken(shard: int, params: GetJobParams) -> None:
        raise StoreError("shard 0: UndefinedColumn: column x does not exist", shard=0, sqlstate="42703")

    app = create_app(settings(), store=store, crons=MemCronStore(store))
    store.get_job = broken  # type: ignore[method-assign]
    async for api in serve(app):
        created = (await api.post("/api/v1/jobs", json=body(), headers=A)).json()
        problem = assert_problem(await api.get(f"/api/v1/jobs/{created['jobId']}", headers=A), 500)
        # What went wrong is logged, not shown.
        assert "sqlstate" not in problem and "column" not in problem["detail"]


def test_the_table_maps_most_specific_first() -> None:
    cases: list[tuple[VakitError, int]] = [
        (PayloadTooLarge("too big"), 413),
        (InvalidRequest("bad"), 422),
        (InvalidSchedule("bad schedule"), 422),
        (Unauthorized("who"), 401),
        (NotFound("none"), 404),
        (Conflict("no"), 409),
        (Overloaded("busy", retry_after=3), 429),
        (ShardUnavailable("down", shard=1), 503),
        (CoordinationUnavailable("zk"), 503),
        (StoreError("boom", shard=0, sqlstate="XX000"), 500),
        (VakitError("generic"), 500),
    ]
    for exc, status in cases:
        assert kind_of(exc).status == status, exc
        assert not hasattr(exc, "status")  # errors know no HTTP
    body_, headers = problem_for(Overloaded("busy", retry_after=3))
    assert body_["status"] == 429 and headers == {"Retry-After": "3"}
    body_, headers = problem_for(ShardUnavailable("down", shard=1))
    assert body_["shard"] == 1 and headers == {"Retry-After": "2"}


async def test_openapi_documents_the_batch_routes(api: httpx.AsyncClient) -> None:
    spec = (await api.get("/openapi.json")).json()
    batch = spec["paths"]["/api/v1/jobs:batch"]["post"]
    assert batch["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/BatchCreateJobsIn")
    assert batch["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/BatchCreateJobsOut"
    )
    items = spec["components"]["schemas"]["BatchCreateJobsIn"]["properties"]["jobs"]
    # Each item is a BatchJobIn, or any other value answered with its own 422.
    job_ref, other = items["items"]["anyOf"]
    assert job_ref["$ref"].endswith("/BatchJobIn") and items["maxItems"] == 1000
    assert other == {}
    assert "idempotencyKey" in spec["components"]["schemas"]["BatchJobIn"]["properties"]
    assert "/api/v1/cron-jobs:batch" in spec["paths"]


# -- batch create ------------------------------------------------------------------


async def test_batch_gives_each_job_its_own_result(api: httpx.AsyncClient, store: MemStore) -> None:
    single = await api.post("/api/v1/jobs", json=body(), headers={**A, "Idempotency-Key": "before"})
    jobs = [
        body(payload={"n": 0}),  # 0: created
        body(maxAttempts=0),  # 1: invalid
        body(payload={"n": 2}, idempotencyKey="k2"),  # 2: created
        body(payload={"n": 2}, idempotencyKey="k2"),  # 3: the same key and body again: a repeat of 2
        body(payload={"other": True}, idempotencyKey="k2"),  # 4: the same key, another body
        body(idempotencyKey="before"),  # 5: a repeat of the single create
        body(payload={"x": "y" * 2000}),  # 6: payload too large
        body(target={"kind": "NOOP"}),  # 7: NOOP disabled
        "not an object",  # 8
        body(surprise=1),  # 9: unknown field
    ]
    r = await api.post("/api/v1/jobs:batch", json={"jobs": jobs}, headers=A)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    results = r.json()["results"]
    assert [x["index"] for x in results] == list(range(len(jobs)))
    assert [x["status"] for x in results] == [201, 422, 201, 200, 422, 200, 413, 422, 422, 422]
    assert results[3]["jobId"] == results[2]["jobId"]
    assert results[5]["jobId"] == single.json()["jobId"]
    assert results[1]["problem"]["errors"][0]["field"] == "maxAttempts"
    assert results[6]["problem"]["title"] == "Payload too large"
    assert results[9]["problem"]["errors"][0]["field"] == "surprise"
    for x in results:
        if x["status"] in (200, 201):
            assert x["jobStatus"] == "SCHEDULED" and "problem" not in x
            assert (await api.get(f"/api/v1/jobs/{x['jobId']}", headers=A)).status_code == 200
        else:
            assert x["problem"]["status"] == x["status"] and "jobId" not in x
    # The single create, and jobs 0 and 2.
    assert sum(len(s.rows) for s in store._shards) == 3


async def test_a_batch_sent_again_creates_nothing_new(api: httpx.AsyncClient, store: MemStore) -> None:
    jobs = [body(payload={"n": i}, idempotencyKey=f"k{i}") for i in range(50)]
    first = (await api.post("/api/v1/jobs:batch", json={"jobs": jobs}, headers=A)).json()["results"]
    again = (await api.post("/api/v1/jobs:batch", json={"jobs": jobs}, headers=A)).json()["results"]
    assert {x["status"] for x in first} == {201} and {x["status"] for x in again} == {200}
    assert [x["jobId"] for x in first] == [x["jobId"] for x in again]
    assert sum(len(s.rows) for s in store._shards) == 50


async def test_batch_items_of_an_unavailable_shard_are_503(
    api: httpx.AsyncClient, store: FlakyShardStore
) -> None:
    store.down = 1
    jobs = [body(payload={"n": i}) for i in range(40)] + [
        body(payload={"k": i}, idempotencyKey=f"key-{i}") for i in range(40)
    ]
    results = (await api.post("/api/v1/jobs:batch", json={"jobs": jobs}, headers=A)).json()["results"]
    statuses = {x["status"] for x in results}
    assert statuses == {201, 503}  # 80 jobs on random and keyed slots reach both shards
    for x in results:
        if x["status"] == 503:
            assert x["problem"]["title"] == "Shard unavailable" and x["problem"]["shard"] == 1
    created = [x for x in results if x["status"] == 201]
    assert len(store._shards[0].rows) == len(created) and not store._shards[1].rows


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        ({"jobs": []}, 422),
        ({"jobs": [body()] * 1001}, 422),
        ({"jobs": "nope"}, 422),
        ([body()], 422),
        ({"jobs": [body()], "extra": 1}, 422),
    ],
    ids=["empty", "over 1000", "not a list", "not an object", "unknown field"],
)
async def test_a_malformed_batch_is_refused_whole(
    api: httpx.AsyncClient, store: MemStore, payload: Any, status: int
) -> None:
    assert_problem(await api.post("/api/v1/jobs:batch", json=payload, headers=A), status)
    assert all(not s.rows for s in store._shards)


async def test_batch_malformed_json_is_400(api: httpx.AsyncClient) -> None:
    r = await api.post("/api/v1/jobs:batch", content=b'{"jobs": [', headers={**A, "Content-Type": "application/json"})
    assert assert_problem(r, 400)["title"] == "Malformed JSON"


async def test_a_batch_the_fast_path_leaves_is_answered_by_the_declared_route(
    api: httpx.AsyncClient, store: MemStore
) -> None:
    # orjson (the fast path's parser) refuses integers beyond 64 bits; the
    # route's parser takes them, and the job is created all the same.
    big = 2**70
    raw = json.dumps({"jobs": [body(payload={"n": big})]}).encode()
    r = await api.post("/api/v1/jobs:batch", content=raw, headers={**A, "Content-Type": "application/json"})
    [result] = r.json()["results"]
    assert result["status"] == 201
    got = await api.get(f"/api/v1/jobs/{result['jobId']}", headers=A)
    assert got.json()["payload"] == {"n": big}
    # A body sent as another media type is the route's to answer, as before.
    r = await api.post("/api/v1/jobs:batch", content=json.dumps({"jobs": [body()]}), headers={**A, "Content-Type": "text/plain"})
    plain = await api.post("/api/v1/jobs", content=json.dumps(body()), headers={**A, "Content-Type": "text/plain"})
    assert r.status_code == plain.status_code
    assert sum(len(s.rows) for s in store._shards) == 1


async def test_an_operator_batch_acts_for_the_owner_it_names(api: httpx.AsyncClient) -> None:
    r = await api.post("/api/v1/jobs:batch?owner=svc-b", json={"jobs": [body()]}, headers=OP)
    [result] = r.json()["results"]
    assert result["status"] == 201
    assert (await api.get(f"/api/v1/jobs/{result['jobId']}", headers=B)).status_code == 200
    assert (await api.get(f"/api/v1/jobs/{result['jobId']}", headers=A)).status_code == 404
    # A tenant may not name another owner.
    assert_problem(await api.post("/api/v1/jobs:batch?owner=svc-b", json={"jobs": [body()]}, headers=A), 403)


# -- cron batch ----------------------------------------------------------------------


def cron(name: str, **over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "schedule": "0 0 * * *",
        "timeZone": "Europe/Istanbul",
        "target": {"kind": "HTTP", "url": "https://hooks.example.com/run"},
    }
    out.update(over)
    return out


async def test_cron_batch_follows_single_create_rules(api: httpx.AsyncClient) -> None:
    single = await api.post("/api/v1/cron-jobs", json=cron("existing"), headers=A)
    assert single.status_code == 201
    crons = [
        cron("a"),  # 0: created
        cron("b", schedule="61 * * * *"),  # 1: invalid schedule
        cron("a"),  # 2: same name and body in the batch: a repeat of 0
        cron("a", schedule="0 1 * * *"),  # 3: same name, another body: 409
        cron("existing"),  # 4: same as the single create: 200
        cron("existing", schedule="0 2 * * *"),  # 5: another body than the existing one: 409
        cron("c", payload={"x": "y" * 2000}),  # 6: 413
        {"name": "d"},  # 7: missing fields
    ]
    r = await api.post("/api/v1/cron-jobs:batch", json={"cronJobs": crons}, headers=A)
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["status"] for x in results] == [201, 422, 200, 409, 200, 409, 413, 422]
    assert results[2]["cronJobId"] == results[0]["cronJobId"]
    assert results[4]["cronJobId"] == single.json()["cronJobId"]
    assert "61" in results[1]["problem"]["detail"] or "minute" in results[1]["problem"]["detail"]
    again = (await api.post("/api/v1/cron-jobs:batch", json={"cronJobs": [cron("a")]}, headers=A)).json()
    assert again["results"] == [{"index": 0, "status": 200, "cronJobId": results[0]["cronJobId"]}]
    names = [c["name"] for c in (await api.get("/api/v1/cron-jobs", headers=A)).json()["items"]]
    assert names == ["a", "existing"]
    # Owners are apart: B's "a" is B's own.
    b = (await api.post("/api/v1/cron-jobs:batch", json={"cronJobs": [cron("a")]}, headers=B)).json()
    assert b["results"][0]["status"] == 201 and b["results"][0]["cronJobId"] != results[0]["cronJobId"]


async def test_ops_endpoints(api: httpx.AsyncClient) -> None:
    assert (await api.get("/healthz")).json() == {"status": "ok"}
    ready = await api.get("/readyz")
    assert ready.status_code == 503 and all(s["migrated"] and s["workers"] == 0 for s in ready.json()["shards"])
    status = (await api.get("/api/v1/cluster", headers=OP)).json()
    assert status["coordination"] == "static" and [s["shard"] for s in status["shards"]] == [0, 1]
    lateness = (await api.get("/api/v1/cluster/lateness?minutes=5", headers=OP)).json()
    assert lateness["windowMinutes"] == 5 and lateness["cluster"] == [] and lateness["missingShards"] == []
    assert [(s["shard"], s["minutes"]) for s in lateness["shards"]] == [(0, []), (1, [])]
    assert_problem(await api.get("/api/v1/cluster/lateness?minutes=61", headers=OP), 422)
    await api.post("/api/v1/jobs", json=body(), headers=A)
    metrics = (await api.get("/metrics", headers=OP)).text
    assert 'vakit_api_requests_total{method="POST",route="/api/v1/jobs",status="201"}' in metrics


# -- roles: tenant and operator tokens ---------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/cluster", "/api/v1/cluster/lateness", "/metrics"])
async def test_operator_views_refuse_tenants_and_strangers(api: httpx.AsyncClient, path: str) -> None:
    refused = assert_problem(await api.get(path, headers=A), 403)
    assert "operator" in refused["detail"]
    assert_problem(await api.get(path), 401)
    assert_problem(await api.get(path, headers={"Authorization": "Bearer token-a-not"}), 401)
    assert (await api.get(path, headers=OP)).status_code == 200


async def test_an_operator_acts_for_any_owner_and_a_tenant_only_for_its_own(
    api: httpx.AsyncClient, store: MemStore
) -> None:
    # The fast create path and the generic routes read ?owner= alike.
    made = await api.post("/api/v1/jobs?owner=svc-a", json=body(), headers=OP)
    assert made.status_code == 201, made.text
    jid = made.json()["jobId"]
    assert (await api.get(f"/api/v1/jobs/{jid}", headers=A)).status_code == 200  # svc-a's own
    assert (await api.get(f"/api/v1/jobs/{jid}?owner=svc-a", headers=OP)).status_code == 200
    assert_problem(await api.get(f"/api/v1/jobs/{jid}", headers=OP), 404)  # "ops" owns nothing
    assert (await api.get(f"/api/v1/jobs/{jid}?owner=svc-a", headers=A)).status_code == 200
    rows = sum(len(s.rows) for s in store._shards)
    for method, url, payload in (
        ("POST", "/api/v1/jobs?owner=svc-a", body()),
        ("POST", "/api/v1/jobs:batch?owner=svc-a", {"jobs": [body()]}),
        ("GET", f"/api/v1/jobs/{jid}?owner=svc-a", None),
        ("DELETE", f"/api/v1/jobs/{jid}?owner=svc-a", None),
        ("GET", "/api/v1/cron-jobs?owner=svc-a", None),
    ):
        refused = assert_problem(await api.request(method, url, json=payload, headers=B), 403)
        assert "operator" in refused["detail"], (method, url)
    assert sum(len(s.rows) for s in store._shards) == rows  # nothing written
    assert (await api.get(f"/api/v1/jobs/{jid}", headers=A)).json()["status"] == "SCHEDULED"


async def test_cron_batch_computes_each_first_slot_as_a_single_create(api: httpx.AsyncClient) -> None:
    # The batch shares parsed schedules between its crons; each must still get
    # the slot a single create gives it (zones, expressions and H fields apart).
    crons = [
        cron("istanbul-1"),
        cron("istanbul-2"),
        cron("utc", timeZone="UTC"),
        cron("three", schedule="0 3 * * *"),
        cron("hashed-1", schedule="H H * * *"),
        cron("hashed-2", schedule="H H * * *"),
        cron("every", schedule="every 2h"),
    ]
    results = (await api.post("/api/v1/cron-jobs:batch", json={"cronJobs": crons}, headers=A)).json()["results"]
    assert {x["status"] for x in results} == {201}
    batch = {}
    for x in results:
        got = (await api.get(f"/api/v1/cron-jobs/{x['cronJobId']}", headers=A)).json()
        batch[got["name"]] = (got["nextFireAt"], got["scheduleKind"])
    for c in crons:
        single = (await api.post("/api/v1/cron-jobs", json=c, headers=B)).json()
        if not c["name"].startswith("hashed"):  # H picks by the cron's id: B's id is another
            assert batch[c["name"]] == (single["nextFireAt"], single["scheduleKind"]), c
    assert batch["istanbul-1"] == batch["istanbul-2"] != batch["utc"]
    assert batch["istanbul-1"] != batch["three"]
    # An H schedule's slot is its own: the preview from just before it, made
    # from the cron's own id, finds that very slot.
    for x in results[4:6]:
        slot = datetime.fromisoformat(batch[crons[x["index"]]["name"]][0])
        before = (slot - timedelta(minutes=1)).isoformat()
        preview = await api.get(
            f"/api/v1/cron-jobs/{x['cronJobId']}/preview", params={"from": before, "count": 1}, headers=A
        )
        assert datetime.fromisoformat(preview.json()["fires"][0]["scheduledFor"]) == slot


async def test_a_chunked_body_over_the_limit_is_refused(api: httpx.AsyncClient, store: MemStore) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        text = json.dumps(body(payload={"x": "y" * 40_000})).encode()
        for i in range(0, len(text), 4096):
            yield text[i : i + 4096]

    r = await api.post("/api/v1/jobs", content=chunks(), headers={**A, "Content-Type": "application/json"})
    assert "content-length" not in r.request.headers
    assert_problem(r, 413)
    small = json.dumps(body()).encode()

    async def one_chunk() -> AsyncIterator[bytes]:
        yield small

    ok = await api.post("/api/v1/jobs", content=one_chunk(), headers={**A, "Content-Type": "application/json"})
    assert ok.status_code == 201
    assert sum(len(s.rows) for s in store._shards) == 1


# -- the Idempotency-Key draft and internal errors ------------------------------


class HeldStore(FlakyShardStore):
    """A MemStore whose single creates wait for ``gate`` once it is set up."""

    gate: Any = None

    async def create_job(self, shard: int, params: Any) -> CreateResult:
        if self.gate is not None:
            await self.gate.wait()
        return await super().create_job(shard, params)


async def test_a_key_in_flight_is_409_and_the_first_still_wins() -> None:
    import asyncio

    store = HeldStore(2)
    store.gate = asyncio.Event()
    app = create_app(settings(), store=store, crons=MemCronStore(store))
    async for api in serve(app):
        headers = {**A, "Idempotency-Key": "in-flight"}
        first = asyncio.create_task(api.post("/api/v1/jobs", json=body(), headers=headers))
        await asyncio.sleep(0.05)  # the first is now waiting inside the store
        second = assert_problem(await api.post("/api/v1/jobs", json=body(), headers=headers), 409)
        assert second["type"] == "/problems/idempotency-key-in-flight"
        # Another owner's same key is its own request, not in flight.
        other = asyncio.create_task(api.post("/api/v1/jobs", json=body(), headers={**B, "Idempotency-Key": "in-flight"}))
        store.gate.set()
        assert (await first).status_code == 201 and (await other).status_code == 201
        third = await api.post("/api/v1/jobs", json=body(), headers=headers)
        assert third.status_code == 200 and third.headers["Idempotent-Replayed"] == "true"
        assert third.json()["jobId"] == (await first).json()["jobId"]
        assert sum(len(s.rows) for s in store._shards) == 2


class BrokenStore(FlakyShardStore):
    async def get_job(self, shard: int, params: GetJobParams) -> Any:
        # What a driver error quoting the tenant's data looks like once translated.
        raise StoreError('shard 0: DataError: invalid json: {"secret": "TENANT-DATA-42"}', shard=shard, sqlstate="22P02")


async def test_an_internal_error_logs_no_byte_of_the_request(caplog: pytest.LogCaptureFixture) -> None:
    store = BrokenStore(2)
    app = create_app(settings(), store=store, crons=MemCronStore(store))
    async for api in serve(app):
        r = await api.get("/api/v1/jobs/job_01M8NDCRQPEVT9TKBNSP4S1NEN", headers=A)
        problem = assert_problem(r, 500)
        assert "TENANT-DATA-42" not in r.text
    assert problem["type"] == "/problems/internal-error"
    errors = [rec for rec in caplog.records if rec.levelname == "ERROR"]
    assert len(errors) == 1
    line = errors[0]
    assert "TENANT-DATA-42" not in caplog.text and line.exc_info is None
    assert "StoreError" in line.getMessage() and getattr(line, "sqlstate", None) == "22P02"
    assert any("get_job" in frame for frame in line.frames)  # type: ignore[attr-defined]
