"""Tenancy against real PostgreSQL shards: token roles, the operator-only
views, ``/metrics`` on its own port."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import httpx
import pytest

from cluster.service import api_app
from tests.integration.test_api import OP, A, B, body, client_for, settings_for

pytestmark = pytest.mark.integration


@pytest.fixture
async def api(shard_dsns: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    async for client in client_for(settings_for(shard_dsns)):
        yield client


def problem(r: httpx.Response, status: int) -> dict[str, object]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    out: dict[str, object] = r.json()
    assert out["status"] == status
    return out


async def test_cluster_and_metrics_are_for_operators(api: httpx.AsyncClient) -> None:
    for path in ("/api/v1/cluster", "/metrics"):
        assert "operator" in str(problem(await api.get(path, headers=A), 403)["detail"])
        problem(await api.get(path), 401)
        assert (await api.get(path, headers=OP)).status_code == 200, path
    report = (await api.get("/api/v1/cluster", headers=OP)).json()
    assert [s["shard"] for s in report["shards"]] == [0, 1]


async def test_operator_acts_for_an_owner_tenants_only_for_themselves(api: httpx.AsyncClient) -> None:
    jid = (await api.post("/api/v1/jobs?owner=svc-a", json=body(), headers=OP)).json()["jobId"]
    assert (await api.get(f"/api/v1/jobs/{jid}", headers=A)).json()["status"] == "SCHEDULED"
    problem(await api.delete(f"/api/v1/jobs/{jid}?owner=svc-a", headers=B), 403)
    problem(await api.get(f"/api/v1/jobs/{jid}", headers=B), 404)
    cancelled = await api.delete(f"/api/v1/jobs/{jid}?owner=svc-a", headers=OP)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_metrics_on_their_own_loopback_port(shard_dsns: list[str]) -> None:
    app = api_app(settings_for(shard_dsns, api_metrics_port=0, metrics_host="127.0.0.1"))
    async with app.router.lifespan_context(app):
        port = app.state.ctx.metrics_port
        assert port
        status, text = _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and "vakit_api_requests_total" in text
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            problem(await client.get("/metrics", headers=A), 403)  # the API port still guards it
    with pytest.raises(OSError):  # closed with the app
        _get(f"http://127.0.0.1:{port}/metrics")
