"""Tenancy against real PostgreSQL shards: token roles, the operator-only
views, ``/metrics`` on its own port."""

from __future__ import annotations

import asyncio
import re
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster.processes import api_app
from tests.helpers import wait_for
from tests.integration.test_api import OP, A, B, body, client_for, count_jobs, settings_for
from tests.openapi_conformance import conformance_hooks
from tests.procs import FaultSink, running_processes

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


async def test_operator_acts_for_an_owner_tenants_only_for_themselves(
    api: httpx.AsyncClient,
) -> None:
    jid = (await api.post("/api/v1/jobs?owner=svc-a", json=body(), headers=OP)).json()["jobId"]
    assert (await api.get(f"/api/v1/jobs/{jid}", headers=A)).json()["status"] == "SCHEDULED"
    problem(await api.delete(f"/api/v1/jobs/{jid}?owner=svc-a", headers=B), 403)
    problem(await api.get(f"/api/v1/jobs/{jid}", headers=B), 404)
    cancelled = await api.delete(f"/api/v1/jobs/{jid}?owner=svc-a", headers=OP)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers or {}), timeout=5
        ) as r:
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
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api", event_hooks=conformance_hooks(app.openapi)
        ) as client:
            problem(await client.get("/metrics", headers=A), 403)  # the API port still guards it
    with pytest.raises(OSError):  # closed with the app
        _get(f"http://127.0.0.1:{port}/metrics")


# -- per-owner limits: 429 with Retry-After, nothing written -------------------------


def cron_body(name: str, **over: Any) -> dict[str, Any]:
    return {
        "name": name,
        "schedule": "0 0 1 1 *",
        "timeZone": "UTC",
        "target": {"kind": "HTTP", "url": "https://hooks.example.com/run"},
        **over,
    }


def limited(r: httpx.Response, limit: str) -> int:
    out = problem(r, 429)
    assert out["limit"] == limit, out
    retry_after = int(r.headers["Retry-After"])
    assert retry_after >= 1
    return retry_after


async def test_create_rate_per_owner(shard_dsns: list[str]) -> None:
    settings = settings_for(shard_dsns, owner_create_rate=0.01, owner_create_burst=3)
    async for api in client_for(settings):
        for _ in range(2):
            assert (await api.post("/api/v1/jobs", json=body(), headers=A)).status_code == 201
        assert (
            await api.post("/api/v1/cron-jobs", json=cron_body("c1"), headers=A)
        ).status_code == 201
        before = count_jobs(shard_dsns)
        assert (
            limited(await api.post("/api/v1/jobs", json=body(), headers=A), "owner_create_rate")
            >= 60
        )
        batch = await api.post("/api/v1/jobs:batch", json={"jobs": [body(), body()]}, headers=A)
        limited(batch, "owner_create_rate")
        limited(
            await api.post("/api/v1/cron-jobs", json=cron_body("c2"), headers=A),
            "owner_create_rate",
        )
        assert count_jobs(shard_dsns) == before  # nothing written
        # Per owner: B has its own budget, also when an operator acts for it.
        assert (await api.post("/api/v1/jobs", json=body(), headers=B)).status_code == 201
        assert (
            await api.post("/api/v1/jobs?owner=svc-b", json=body(), headers=OP)
        ).status_code == 201


async def test_pending_jobs_quota_counts_the_shards(shard_dsns: list[str]) -> None:
    settings = settings_for(shard_dsns, owner_create_rate=0, owner_max_pending_jobs=4)
    async for api in client_for(settings):
        made = await api.post(
            "/api/v1/jobs:batch", json={"jobs": [body() for _ in range(3)]}, headers=A
        )
        ids = [x["jobId"] for x in made.json()["results"]]
        limited(
            await api.post("/api/v1/jobs:batch", json={"jobs": [body(), body()]}, headers=A),
            "owner_max_pending_jobs",
        )
        assert (await api.post("/api/v1/jobs", json=body(), headers=A)).status_code == 201
        limited(await api.post("/api/v1/jobs", json=body(), headers=A), "owner_max_pending_jobs")
        assert (await api.post("/api/v1/jobs", json=body(), headers=B)).status_code == 201
    # Another API process knows the owner's jobs from the shards' count.
    app = api_app(settings)
    async with app.router.lifespan_context(app):
        ctx = app.state.ctx
        await ctx.limits.refresh(ctx.store, ctx.crons)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api", event_hooks=conformance_hooks(app.openapi)
        ) as api:
            limited(
                await api.post("/api/v1/jobs", json=body(), headers=A), "owner_max_pending_jobs"
            )
            for jid in ids[:2]:  # finished jobs leave the quota at the next count
                assert (await api.delete(f"/api/v1/jobs/{jid}", headers=A)).status_code == 200
            await ctx.limits.refresh(ctx.store, ctx.crons)
            made = await api.post("/api/v1/jobs:batch", json={"jobs": [body(), body()]}, headers=A)
            assert [x["status"] for x in made.json()["results"]] == [201, 201]


async def test_a_starting_api_counts_the_owners_jobs_before_its_first_create(
    shard_dsns: list[str],
) -> None:
    # A new API process must not admit an owner's creates as if it had none:
    # its first count lands before it serves (a count that ran alongside the
    # first creates also counted them twice, and refused a create in quota).
    settings = settings_for(shard_dsns, owner_create_rate=0, owner_max_pending_jobs=4)
    async for api in client_for(settings):
        made = await api.post("/api/v1/jobs:batch", json={"jobs": [body() for _ in range(3)]}, headers=A)
        assert [x["status"] for x in made.json()["results"]] == [201] * 3
    async for api in client_for(settings):  # another process, no count asked for
        assert (await api.post("/api/v1/jobs", json=body(), headers=A)).status_code == 201
        limited(await api.post("/api/v1/jobs", json=body(), headers=A), "owner_max_pending_jobs")


async def test_cron_quota_and_manual_triggers(shard_dsns: list[str]) -> None:
    settings = settings_for(shard_dsns, owner_create_rate=0, owner_max_crons=2)
    async for api in client_for(settings):
        first = await api.post("/api/v1/cron-jobs", json=cron_body("one"), headers=A)
        batch = await api.post(
            "/api/v1/cron-jobs:batch", json={"cronJobs": [cron_body("two")]}, headers=A
        )
        assert first.status_code == 201 and batch.json()["results"][0]["status"] == 201
        limited(
            await api.post("/api/v1/cron-jobs", json=cron_body("three"), headers=A),
            "owner_max_crons",
        )
        again = await api.post(
            "/api/v1/cron-jobs:batch", json={"cronJobs": [cron_body("four")]}, headers=A
        )
        limited(again, "owner_max_crons")
        # Manual runs: one per cron_min_interval_seconds (60 s) by default.
        cid = first.json()["cronJobId"]
        assert (await api.post(f"/api/v1/cron-jobs/{cid}/trigger", headers=A)).status_code == 201
        retry = limited(
            await api.post(f"/api/v1/cron-jobs/{cid}/trigger", headers=A),
            "cron_triggers_per_minute",
        )
        assert 55 <= retry <= 60
        other = batch.json()["results"][0]["cronJobId"]
        assert (await api.post(f"/api/v1/cron-jobs/{other}/trigger", headers=A)).status_code == 201
        runs = (await api.get(f"/api/v1/cron-jobs/{cid}/runs", headers=A)).json()["runs"]
        assert len(runs) == 1  # the refused trigger wrote nothing


# -- bounded metric labels ----------------------------------------------------------------


def test_metrics_name_only_declared_targets_and_crons(shard_dsns: list[str], tmp_path: Path) -> None:
    """A worker process fires to several hosts nobody declared and to one the
    operator declared; its /metrics names the declared one, calls the rest
    "other", and names no cron id."""
    with FaultSink() as sink, running_processes(shard_dsns, tmp_path) as procs:
        worker = procs.worker(
            "w1",
            metrics_targets="localhost",
            materializer_interval=0.5,
            cron_last_success_interval_seconds=0,
        ).wait_ready()
        port = sink.port
        urls = [
            f"http://127.0.0.1:{port}/fire",  # undeclared, answers
            f"http://localhost:{port}/fire",  # declared, answers
            "http://127.0.0.2:9/fire",  # undeclared, refused
            "http://127.0.0.3:9/fire",  # undeclared, refused
        ]
        asyncio.run(_create_for_labels(shard_dsns, urls))

        def fired() -> bool:
            by_target = worker.metric_by("vakit_target_fires_total", "target")
            return by_target.get("other", 0) >= 3 and by_target.get("localhost", 0) >= 1

        wait_for(fired, 30, what="firings counted")
        wait_for(
            lambda: worker.metric("vakit_cron_last_success_timestamp_seconds", cron="other") > 0,
            30,
            what="the silent-cron gauge exported",
        )
        assert sink.count() >= 2
        values = {v for _, labels, _ in worker.scrape() for v in labels.values()}
        assert {"other", "localhost"} <= values
        leaked = {v for v in values if "127.0.0." in v or re.fullmatch(r"cron_[0-9A-Z]{26}", v)}
        assert not leaked, leaked


async def _create_for_labels(dsns: list[str], urls: list[str]) -> None:
    settings = settings_for(dsns, http_target_allow=[], allow_private_targets=True)
    async for api in client_for(settings):
        for url in urls:
            now = datetime.now(UTC).isoformat()
            job = body(runAt=now, target={"kind": "HTTP", "url": url}, maxAttempts=1)
            r = await api.post("/api/v1/jobs", json=job, headers=A)
            assert r.status_code == 201, r.text
        cron = cron_body("every-minute", schedule="* * * * *")
        assert (await api.post("/api/v1/cron-jobs", json=cron, headers=A)).status_code == 201
