"""A job's labels through the API, on the in-memory stores (the fast tier):
set by a single and a batch create, shown by a get (``{}`` when none),
refused with a 422 that names the field and changes nothing, counted by
the Idempotency-Key's digest, and searched by exact match
(``GET /api/v1/jobs?label=key=value``, repeatable)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from cluster.api.app import create_app
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from tests.unit.test_api_fast import A, assert_problem, body, serve, settings

PAY = {"team": "payments", "k8s.io/env": "prod"}


@pytest.fixture
def store() -> MemStore:
    return MemStore(2)


@pytest.fixture
async def api(store: MemStore) -> AsyncIterator[httpx.AsyncClient]:
    async for client in serve(create_app(settings(), store=store, crons=MemCronStore(store))):
        yield client


async def created_job(api: httpx.AsyncClient, **over: object) -> dict[str, object]:
    r = await api.post("/api/v1/jobs", json=body(**over), headers=A)
    assert r.status_code == 201, r.text
    got = await api.get(f"/api/v1/jobs/{r.json()['jobId']}", headers=A)
    assert got.status_code == 200
    job: dict[str, object] = got.json()
    return job


async def test_a_job_shows_its_labels_and_an_empty_map_when_it_has_none(api: httpx.AsyncClient) -> None:
    assert (await created_job(api, labels=PAY))["labels"] == PAY
    assert (await created_job(api))["labels"] == {}
    assert (await created_job(api, labels=None))["labels"] == {}
    assert (await created_job(api, labels={}))["labels"] == {}


@pytest.mark.parametrize(
    "labels",
    [{"-bad": "x"}, {"a" * 64: "x"}, {"team": "x" * 256}, {f"k{i}": "v" for i in range(17)}, {"team": 7}, ["x"]],
    ids=["key syntax", "key length", "value length", "too many", "not a string", "not a map"],
)
async def test_bad_labels_are_a_422_naming_the_field_and_change_nothing(
    api: httpx.AsyncClient, store: MemStore, labels: object
) -> None:
    problem = assert_problem(await api.post("/api/v1/jobs", json=body(labels=labels), headers=A), 422)
    assert problem["errors"][0]["field"].split(".")[0] == "labels"
    assert problem["detail"].startswith("labels")
    batch = await api.post("/api/v1/jobs:batch", json={"jobs": [body(labels=PAY), body(labels=labels)]}, headers=A)
    assert batch.status_code == 200, batch.text
    good, bad = batch.json()["results"]
    assert good["status"] == 201 and bad["status"] == 422
    assert bad["problem"]["errors"][0]["field"].split(".")[0] == "labels"
    # Only the batch's good job was written.
    assert sum(len(s.rows) for s in store._shards) == 1


async def test_a_batch_sets_each_jobs_labels(api: httpx.AsyncClient) -> None:
    jobs = [body(labels=PAY), body(), body(labels={"order": "98213"}, idempotencyKey="order-98213")]
    r = await api.post("/api/v1/jobs:batch", json={"jobs": jobs}, headers=A)
    results = r.json()["results"]
    assert [x["status"] for x in results] == [201, 201, 201]
    shown = [(await api.get(f"/api/v1/jobs/{x['jobId']}", headers=A)).json()["labels"] for x in results]
    assert shown == [PAY, {}, {"order": "98213"}]


async def test_labels_are_part_of_a_keyed_request(api: httpx.AsyncClient) -> None:
    headers = {**A, "Idempotency-Key": "order-98213"}
    first = await api.post("/api/v1/jobs", json=body(labels=PAY), headers=headers)
    repeat = await api.post("/api/v1/jobs", json=body(labels=dict(reversed(PAY.items()))), headers=headers)
    assert (first.status_code, repeat.status_code) == (201, 200)
    other = await api.post("/api/v1/jobs", json=body(labels={"team": "other"}), headers=headers)
    assert assert_problem(other, 422)["type"] == "/problems/idempotency-key-reused"
    # No labels and empty labels are one request.
    plain = {**A, "Idempotency-Key": "plain"}
    assert (await api.post("/api/v1/jobs", json=body(), headers=plain)).status_code == 201
    assert (await api.post("/api/v1/jobs", json=body(labels={}), headers=plain)).status_code == 200


async def test_search_by_label_finds_jobs_with_every_pair(api: httpx.AsyncClient) -> None:
    pay = (await created_job(api, labels=PAY))["jobId"]
    eu = (await created_job(api, labels={"team": "payments", "region": "a=b"}))["jobId"]
    await created_job(api)

    async def search(*labels: str) -> list[dict[str, object]]:
        r = await api.get("/api/v1/jobs", params=[("label", x) for x in labels], headers=A)
        assert r.status_code == 200, r.text
        items: list[dict[str, object]] = r.json()["items"]
        return items

    assert {j["jobId"] for j in await search("team=payments")} == {pay, eu}
    assert [j["jobId"] for j in await search("team=payments", "k8s.io/env=prod")] == [pay]
    assert [j["jobId"] for j in await search("region=a=b")] == [eu]  # the first = splits
    assert await search("team=pay") == []
    assert await search("team=") == []  # an empty value is a value
    # Search results show the labels, {} for a job without.
    shown = {j["jobId"]: j["labels"] for j in await search()}
    assert shown.pop(pay) == PAY and shown.pop(eu) == {"team": "payments", "region": "a=b"}
    assert list(shown.values()) == [{}]


@pytest.mark.parametrize(
    "labels",
    [["team"], ["=payments"], ["-team=x"], [f"{'a' * 64}=x"], ["team=" + "x" * 256],
     ["team=a", "team=b"], [f"k{i}=v" for i in range(17)]],
    ids=["no =", "no key", "key syntax", "key length", "value length", "two values", "too many"],
)  # fmt: skip
async def test_a_bad_label_filter_is_a_422(api: httpx.AsyncClient, labels: list[str]) -> None:
    r = await api.get("/api/v1/jobs", params=[("label", x) for x in labels], headers=A)
    problem = assert_problem(r, 422)
    assert problem["field"] == "label" and "label" in problem["detail"]


def test_the_openapi_document_describes_labels() -> None:
    store = MemStore(2)
    spec = create_app(settings(), store=store, crons=MemCronStore(store)).openapi()
    schemas = spec["components"]["schemas"]
    for name in ("CreateJobIn", "BatchJobIn"):
        labels = schemas[name]["properties"]["labels"]
        [as_map] = [s for s in labels["anyOf"] if s.get("type") == "object"]
        assert as_map["maxProperties"] == 16
        assert as_map["additionalProperties"] == {"type": "string", "maxLength": 255}
        assert as_map["propertyNames"]["maxLength"] == 63
    [search] = [p for p in spec["paths"]["/api/v1/jobs"]["get"]["parameters"] if p["name"] == "label"]
    assert search["in"] == "query" and "key=value" in search["description"]
    shown = schemas["JobOut"]["properties"]["labels"]
    assert shown["type"] == "object" and shown["additionalProperties"] == {"type": "string"}
