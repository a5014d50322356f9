"""Targets scoped per owner, through the API on the in-memory stores.

What the operator grants each owner (hosts, domains, Kafka topic prefixes),
the topics nobody may use, and the headers a job may not set: each refusal is
a 422 that names the field and creates nothing; an owner without grants keeps
today's reach (the backwards-compatible default), unless the operator
requires grants. The settings' forms (environment, TOML) are checked here too.
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from cluster.api.app import create_app
from cluster.config import Settings
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from tests.openapi_conformance import conformance_hooks

ORDERS = {"Authorization": "Bearer token-orders"}
BILLING = {"Authorization": "Bearer token-billing"}
LEGACY = {"Authorization": "Bearer token-legacy"}  # an owner with no grants
RUN_AT = (datetime.now(UTC) + timedelta(hours=2)).isoformat().replace("+00:00", "Z")
SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


def settings(**over: Any) -> Settings:
    base: dict[str, Any] = {
        "shards": ["mem-0"],
        "api_tokens": {"token-orders": "orders", "token-billing": "billing", "token-legacy": "legacy"},
        "kafka_bootstrap": "kafka:9092",  # never contacted: the API only checks targets
        "target_grants": {
            "orders": [".orders.example.com", "kafka:orders."],
            "billing": ["hooks.billing.example", "kafka:billing."],
        },
    }
    base.update(over)
    return Settings(**base)


async def serve(s: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, MemStore]]:
    store = MemStore(1)
    app = create_app(s, store=store, crons=MemCronStore(store))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api", event_hooks=conformance_hooks(app.openapi)
        ) as client:
            yield client, store


@pytest.fixture
async def api() -> AsyncIterator[tuple[httpx.AsyncClient, MemStore]]:
    async for pair in serve(settings()):
        yield pair


def job(target: dict[str, Any]) -> dict[str, Any]:
    return {"type": "scoped", "runAt": RUN_AT, "target": target}


def http(url: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "HTTP", "url": url, **extra}


def kafka(topic: str) -> dict[str, Any]:
    return {"kind": "KAFKA", "topic": topic}


def stored(store: MemStore) -> int:
    return sum(len(shard.rows) for shard in store._shards)


async def refused(
    client: httpx.AsyncClient, store: MemStore, auth: dict[str, str], target: dict[str, Any], field: str
) -> str:
    before = stored(store)
    r = await client.post("/api/v1/jobs", json=job(target), headers=auth)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["field"] == field
    assert stored(store) == before  # a refusal creates nothing
    detail: str = problem["detail"]
    return detail


async def test_each_owner_reaches_only_its_own_hosts(api: tuple[httpx.AsyncClient, MemStore]) -> None:
    client, store = api
    ok = await client.post("/api/v1/jobs", json=job(http("https://api.orders.example.com/x")), headers=ORDERS)
    assert ok.status_code == 201, ok.text
    detail = await refused(client, store, ORDERS, http("https://hooks.billing.example/pay"), "target.url")
    assert "not among the hosts granted to 'orders'" in detail
    detail = await refused(client, store, BILLING, http("https://api.orders.example.com/x"), "target.url")
    assert "'billing'" in detail
    ok = await client.post("/api/v1/jobs", json=job(http("https://hooks.billing.example/")), headers=BILLING)
    assert ok.status_code == 201, ok.text


async def test_each_owner_produces_only_to_its_topic_prefixes(
    api: tuple[httpx.AsyncClient, MemStore],
) -> None:
    client, store = api
    ok = await client.post("/api/v1/jobs", json=job(kafka("orders.cancelled")), headers=ORDERS)
    assert ok.status_code == 201, ok.text
    detail = await refused(client, store, ORDERS, kafka("billing.invoices"), "target.topic")
    assert "does not start with a prefix granted to 'orders'" in detail


@pytest.mark.parametrize("topic", ["__consumer_offsets", "_schemas", "__transaction_state", ".", ".."])
async def test_reserved_topics_are_refused_to_everyone(
    api: tuple[httpx.AsyncClient, MemStore], topic: str
) -> None:
    client, store = api
    for auth in (ORDERS, LEGACY):
        await refused(client, store, auth, kafka(topic), "target.topic")


@pytest.mark.parametrize(
    "header",
    [
        "Authorization",
        "authorization",
        "Proxy-Authorization",
        "Cookie",
        "X-Forwarded-For",
        "X-Forwarded-Host",
        "Forwarded",
        "Connection",
        "Transfer-Encoding",
        "Upgrade",
        "Vakit-Owner",
        "webhook-signature",
    ],
)
async def test_credential_hop_by_hop_and_own_headers_are_refused(
    api: tuple[httpx.AsyncClient, MemStore], header: str
) -> None:
    client, store = api
    target = http("https://api.orders.example.com/x", headers={header: "v"})
    detail = await refused(client, store, ORDERS, target, "target.headers")
    assert repr(header) in detail


async def test_credentials_in_the_url_count_as_an_authorization_header(
    api: tuple[httpx.AsyncClient, MemStore],
) -> None:
    client, store = api
    for url in ("https://user:pw@api.orders.example.com/x", "https://user@api.orders.example.com/x"):
        detail = await refused(client, store, ORDERS, http(url), "target.url")
        assert "Authorization" in detail
    async for lenient, _ in serve(settings(target_header_deny=["Cookie"])):
        r = await lenient.post(
            "/api/v1/jobs", json=job(http("https://user:pw@api.orders.example.com/x")), headers=ORDERS
        )
        assert r.status_code == 201, r.text


async def test_crons_are_checked_alike(api: tuple[httpx.AsyncClient, MemStore]) -> None:
    client, _ = api
    cron = {
        "name": "nightly",
        "schedule": "0 2 * * *",
        "timeZone": "Europe/Istanbul",
        "target": http("https://hooks.billing.example/run"),
    }
    r = await client.post("/api/v1/cron-jobs", json=cron, headers=ORDERS)
    assert r.status_code == 422 and r.json()["field"] == "target.url", r.text
    cron["target"] = http("https://api.orders.example.com/run", headers={"Cookie": "x"})
    r = await client.post("/api/v1/cron-jobs", json=cron, headers=ORDERS)
    assert r.status_code == 422 and r.json()["field"] == "target.headers", r.text
    cron["target"] = http("https://api.orders.example.com/run", headers={"X-Team": "orders"})
    r = await client.post("/api/v1/cron-jobs", json=cron, headers=ORDERS)
    assert r.status_code == 201, r.text
    r = await client.patch(
        f"/api/v1/cron-jobs/{r.json()['cronJobId']}", json={"target": kafka("billing.x")}, headers=ORDERS
    )
    assert r.status_code == 422 and r.json()["field"] == "target.topic", r.text


async def test_an_owner_without_grants_keeps_todays_reach(
    api: tuple[httpx.AsyncClient, MemStore],
) -> None:
    client, _ = api
    for target in (http("https://hooks.billing.example/"), kafka("anything.goes"), http("https://x.example.net/")):
        r = await client.post("/api/v1/jobs", json=job(target), headers=LEGACY)
        assert r.status_code == 201, r.text


async def test_required_grants_refuse_owners_without_them() -> None:
    async for client, store in serve(settings(require_target_grants=True)):
        await refused(client, store, LEGACY, http("https://x.example.net/"), "target.url")
        await refused(client, store, LEGACY, kafka("anything.goes"), "target.topic")
        r = await client.post("/api/v1/jobs", json=job(kafka("orders.ok")), headers=ORDERS)
        assert r.status_code == 201, r.text


async def test_the_operator_chooses_the_header_deny_list() -> None:
    async for client, store in serve(settings(target_header_deny=["Cookie"])):
        target = http("https://api.orders.example.com/x", headers={"Authorization": "Bearer own"})
        r = await client.post("/api/v1/jobs", json=job(target), headers=ORDERS)
        assert r.status_code == 201, r.text
        await refused(
            client, store, ORDERS, http("https://api.orders.example.com/x", headers={"cookie": "1"}), "target.headers"
        )
        # Vakit's own headers are not the operator's to give away.
        await refused(
            client,
            store,
            ORDERS,
            http("https://api.orders.example.com/x", headers={"Vakit-Owner": "billing"}),
            "target.headers",
        )


# -- settings --------------------------------------------------------------------


def test_grants_and_secrets_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VAKIT_TARGET_GRANTS", "orders=.orders.example.com|kafka:orders.,billing=10.0.0.0/8")
    monkeypatch.setenv("VAKIT_SIGNING_SECRETS", f"orders={SECRET}|a-plain-text-secret-1234")
    monkeypatch.setenv("VAKIT_TARGET_HEADER_DENY", "Authorization, X-Forwarded-*")
    s = Settings()
    assert s.target_grants == {"orders": [".orders.example.com", "kafka:orders."], "billing": ["10.0.0.0/8"]}
    assert s.signing_secrets == {"orders": [SECRET, "a-plain-text-secret-1234"]}
    assert s.target_header_deny == ["Authorization", "X-Forwarded-*"]


def test_grants_and_secrets_from_toml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "vakit.toml"
    path.write_text(
        "[target_grants]\n"
        'orders = [".orders.example.com", "kafka:orders."]\n'
        "[signing_secrets]\n"
        f'orders = ["{SECRET}"]\n'
    )
    for name in [n for n in os.environ if n.startswith("VAKIT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("VAKIT_CONFIG", str(path))
    s = Settings()
    assert s.target_grants == {"orders": [".orders.example.com", "kafka:orders."]}
    assert s.signing_secrets == {"orders": [SECRET]}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("signing_secrets", {"orders": ["short"]}),  # under 16 bytes
        ("signing_secrets", {"orders": ["whsec_not*base64"]}),
        ("signing_secrets", {"orders": [SECRET, SECRET, SECRET]}),  # more than a rotation
        ("target_grants", {"orders": ["kafka:"]}),
        ("target_grants", {"orders": ["kafka:__consumer"]}),
    ],
)
def test_bad_grants_and_secrets_are_refused_at_start(name: str, value: Any) -> None:
    with pytest.raises(ValidationError):
        Settings(**{name: value})
