"""``/api/v1/limits`` on the in-memory stores (issue 44): operators read the
limits in force and change them at run time; tenants may not; a worker
sees a change at its next reading, without a restart."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from cluster.api.app import create_app
from cluster.cli import main
from cluster.cli_client.http import ApiClient
from cluster.clock import FakeClock
from cluster.model import TargetLimit
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from cluster.worker.admission import LimitBook
from tests.unit.test_api_fast import OP, PROBLEM, A, serve, settings


@pytest.fixture
def store() -> MemStore:
    return MemStore(2, FakeClock(datetime.now(UTC)))


@pytest.fixture
async def api(store: MemStore) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        settings(target_limits={"localhost": "20/200"}), store=store, crons=MemCronStore(store)
    )
    async for client in serve(app):
        yield client


async def test_operators_read_set_and_drop_limits(api: httpx.AsyncClient, store: MemStore) -> None:
    r = await api.get("/api/v1/limits", headers=OP)
    assert r.status_code == 200
    assert r.json() == {
        "shards": 2,
        "limits": [
            {"key": "localhost", "concurrency": 20, "rate": 200.0, "burst": None,
             "source": "config", "scope": "cluster", "effectiveConcurrency": 20,
             "consistent": True},
        ],
        "unreadableShards": [],
    }  # fmt: skip
    r = await api.put(
        "/api/v1/limits/Billing.Internal", json={"concurrency": 1, "rate": 5}, headers=OP
    )
    assert r.status_code == 200
    billing = {x["key"]: x for x in r.json()["limits"]}["billing.internal"]
    assert billing["source"] == "runtime" and billing["effectiveConcurrency"] == 2  # 1 per shard
    # Every shard holds it, and a worker applies it at its next reading.
    for shard in (0, 1):
        assert [s.key for s in await store.read_limits(shard)] == ["billing.internal"]
    book = LimitBook({"localhost": TargetLimit(20, 200.0)}, store)
    assert (await book.refresh(1))["billing.internal"] == TargetLimit(1, 5.0)
    # Lifting a configured limit at run time, then back to the configuration.
    r = await api.put("/api/v1/limits/localhost", json={}, headers=OP)
    local = {x["key"]: x for x in r.json()["limits"]}["localhost"]
    assert (local["concurrency"], local["rate"], local["source"]) == (None, None, "runtime")
    r = await api.delete("/api/v1/limits/localhost", headers=OP)
    local = {x["key"]: x for x in r.json()["limits"]}["localhost"]
    assert (local["concurrency"], local["source"]) == (20, "config")


async def test_tenants_and_bad_limits_are_refused(api: httpx.AsyncClient) -> None:
    r = await api.put("/api/v1/limits/localhost", json={"concurrency": 1}, headers=A)
    assert r.status_code == 403 and r.headers["content-type"] == PROBLEM
    for bad in ({"rate": 0}, {"burst": 0.5}, {"concurrency": -1}, {"rate": 5, "extra": 1}):
        r = await api.put("/api/v1/limits/localhost", json=bad, headers=OP)
        assert r.status_code == 422, bad
    r = await api.get("/api/v1/limits", headers=A)
    assert r.status_code == 403


def test_the_cli_sends_the_spelling_of_the_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, str, Any]] = []
    answer = {"shards": 2, "limits": [], "unreadableShards": []}

    def request(self: ApiClient, method: str, path: str, *, params: Any = None, body: Any = None) -> Any:
        sent.append((method, path, body))
        return answer

    monkeypatch.setattr(ApiClient, "request", request)
    run = CliRunner().invoke
    url = ["--api-url", "http://x"]
    assert run(main, ["limits", "set", "localhost", "20/200", *url]).exit_code == 0
    assert run(main, ["limits", "set", "kafka:orders", "/50/5", *url]).exit_code == 0
    assert run(main, ["limits", "set", "localhost", "none", *url]).exit_code == 0
    assert run(main, ["limits", "unset", "localhost", *url]).exit_code == 0
    assert run(main, ["limits", "list", "-o", "json", *url]).exit_code == 0
    assert run(main, ["limits", "set", "localhost", "many", *url]).exit_code == 2
    assert sent == [
        ("PUT", "/api/v1/limits/localhost", {"concurrency": 20, "rate": 200.0, "burst": None}),
        ("PUT", "/api/v1/limits/kafka%3Aorders", {"concurrency": None, "rate": 50.0, "burst": 5.0}),
        ("PUT", "/api/v1/limits/localhost", {}),
        ("DELETE", "/api/v1/limits/localhost", None),
        ("GET", "/api/v1/limits", None),
    ]
