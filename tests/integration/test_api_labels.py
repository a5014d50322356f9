"""A job's labels through the HTTP API on real PostgreSQL shards (two):
the lean single create, the far table and the batch statement store them,
a get and the search by label read them back, and bad labels store
nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.integration.test_api import A, body, client_for, count_jobs, settings_for

pytestmark = pytest.mark.integration

PAY = {"team": "payments", "k8s.io/env": "prod"}


@pytest.fixture
async def api(shard_dsns: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    async for client in client_for(settings_for(shard_dsns)):
        yield client


async def test_labels_round_trip_and_search_on_postgres(api: httpx.AsyncClient) -> None:
    far_at = (datetime.now(UTC) + timedelta(days=30)).isoformat().replace("+00:00", "Z")
    ids = {}
    for name, over in (("near", {"labels": PAY}), ("far", {"labels": PAY, "runAt": far_at}), ("plain", {})):
        r = await api.post("/api/v1/jobs", json=body(**over), headers=A)
        assert r.status_code == 201, r.text
        ids[name] = r.json()["jobId"]
    batch = await api.post(
        "/api/v1/jobs:batch",
        json={"jobs": [body(labels={"team": "payments"}), body(idempotencyKey="lbl-1", labels=PAY), body()]},
        headers=A,
    )
    ids.update(zip(("b-team", "b-keyed", "b-plain"), (x["jobId"] for x in batch.json()["results"]), strict=True))
    shown = {k: (await api.get(f"/api/v1/jobs/{v}", headers=A)).json()["labels"] for k, v in ids.items()}
    assert shown == {
        "near": PAY, "far": PAY, "plain": {}, "b-team": {"team": "payments"}, "b-keyed": PAY, "b-plain": {},
    }  # fmt: skip

    async def search(*labels: str) -> set[str]:
        r = await api.get("/api/v1/jobs", params=[("label", x) for x in labels], headers=A)
        assert r.status_code == 200, r.text
        return {j["jobId"] for j in r.json()["items"]}

    team = {ids[k] for k in ("near", "far", "b-team", "b-keyed")}
    assert await search("team=payments") == team
    assert await search("team=payments", "k8s.io/env=prod") == {ids[k] for k in ("near", "far", "b-keyed")}
    assert await search("team=pay") == set()
    assert await search() == set(ids.values())


async def test_bad_labels_store_nothing(api: httpx.AsyncClient, shard_dsns: list[str]) -> None:
    before = count_jobs(shard_dsns)
    r = await api.post("/api/v1/jobs", json=body(labels={"-bad": "x"}), headers=A)
    assert r.status_code == 422 and r.json()["errors"][0]["field"].startswith("labels")
    r = await api.get("/api/v1/jobs", params={"label": "no-equals"}, headers=A)
    assert r.status_code == 422 and r.json()["field"] == "label"
    assert count_jobs(shard_dsns) == before
