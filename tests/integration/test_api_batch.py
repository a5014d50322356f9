"""Batch create (``POST /api/v1/jobs:batch``) against real PostgreSQL shards.

Per-job results for mixed batches, every accepted job stored exactly once, a
repeated batch that creates nothing, and a stopped shard whose jobs get 503
while the other shard's are created.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

import shardmap
from cluster.local.pgserver import PgServer
from cluster.store.migrate import migrate_shard
from tests.integration.test_api import A, B, client_for, settings_for
from tests.pgfixtures import make_base_dir, start_pg

pytestmark = pytest.mark.integration

RUN_AT = (datetime.now(UTC) + timedelta(minutes=30)).isoformat().replace("+00:00", "Z")
FAR = (datetime.now(UTC) + timedelta(days=40)).isoformat().replace("+00:00", "Z")


def job(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "ORDER_AUTO_CANCEL",
        "runAt": RUN_AT,
        "target": {"kind": "HTTP", "url": "https://hooks.example.com/cancel"},
        "payload": {"orderId": 98213},
    }
    out.update(over)
    return out


@pytest.fixture
async def api(shard_dsns: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    async for client in client_for(settings_for(shard_dsns)):
        yield client


def stored(dsns: list[str]) -> dict[uuid.UUID, tuple[int, str, int]]:
    """Every job row on every shard: id -> (shard, table, copies of the id)."""
    out: dict[uuid.UUID, tuple[int, str, int]] = {}
    for shard, dsn in enumerate(dsns):
        with psycopg.connect(dsn) as conn:
            for table in ("jobs", "jobs_far"):
                for (jid,) in conn.execute(f"SELECT id FROM {table}").fetchall():
                    seen = out.get(jid)
                    out[jid] = (shard, table, (seen[2] if seen else 0) + 1)
    return out


def key_count(dsns: list[str]) -> int:
    total = 0
    for dsn in dsns:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT count(*) FROM job_keys").fetchone()
            total += row[0] if row else 0
    return total


async def test_mixed_batch_gets_a_result_per_job_and_stores_each_once(
    api: httpx.AsyncClient, shard_dsns: list[str]
) -> None:
    single = await api.post("/api/v1/jobs", json=job(), headers={**A, "Idempotency-Key": "single"})
    assert single.status_code == 201
    jobs: list[Any] = [job(payload={"n": i}) for i in range(20)]  # 0-19: keyless, both shards
    jobs += [job(payload={"k": i}, idempotencyKey=f"k-{i}") for i in range(20)]  # 20-39: keyed
    jobs += [
        job(maxAttempts=0),  # 40: invalid
        job(runAt="2026-12-01T10:00:00"),  # 41: naive time
        job(payload={"k": 3}, idempotencyKey="k-3"),  # 42: repeat of 23 within the batch
        job(payload={"other": 1}, idempotencyKey="k-4"),  # 43: key of 24 with another body
        job(idempotencyKey="single"),  # 44: repeat of the single create
        job(payload={"other": 1}, idempotencyKey="single"),  # 45: the single's key, another body
        job(payload={"blob": "x" * 2000}),  # 46: payload too large (limit 1024)
        job(target={"kind": "HTTP", "url": "http://127.0.0.1/"}),  # 47: refused target
        job(runAt=FAR, idempotencyKey="far"),  # 48: far table
        {"type": "x"},  # 49: missing fields
    ]
    r = await api.post("/api/v1/jobs:batch", json={"jobs": jobs}, headers=A)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["index"] for x in results] == list(range(len(jobs)))
    # A key reused with another body is a 422 (the Idempotency-Key draft).
    expected = [201] * 40 + [422, 422, 200, 422, 200, 422, 413, 422, 201, 422]
    assert [x["status"] for x in results] == expected
    assert results[42]["jobId"] == results[23]["jobId"]
    assert results[44]["jobId"] == single.json()["jobId"]
    assert "Idempotency-Key" in results[43]["problem"]["detail"]
    assert results[45]["problem"]["type"] == "/problems/idempotency-key-reused"
    for x in results:
        if x["status"] >= 400:
            assert x["problem"]["status"] == x["status"] and x["problem"]["detail"]

    rows = stored(shard_dsns)
    accepted = {shardmap.decode_id("job", x["jobId"]) for x in results if x["status"] in (200, 201)}
    assert accepted <= set(rows)
    assert all(copies == 1 for _, _, copies in rows.values())
    # The single create, and the 41 jobs this batch created; nothing else.
    assert len(rows) == 42
    assert {shard for shard, _, _ in rows.values()} == {0, 1}
    far_id = shardmap.decode_id("job", results[48]["jobId"])
    assert rows[far_id][1] == "jobs_far"
    # Each job lives where its id routes, and reads back through the API.
    shards = shardmap.ShardMap(2)
    for jid, (shard, _, _) in rows.items():
        assert shards.shard_of(jid) == shard
    got = await api.get(f"/api/v1/jobs/{results[20]['jobId']}", headers=A)
    assert got.json()["payload"] == {"k": 0} and got.json()["idempotencyKey"] == "k-0"


async def test_a_repeated_batch_creates_nothing_new(api: httpx.AsyncClient, shard_dsns: list[str]) -> None:
    jobs = [job(payload={"n": i}, idempotencyKey=f"order-{i}") for i in range(300)]
    first = (await api.post("/api/v1/jobs:batch", json={"jobs": jobs}, headers=A)).json()["results"]
    before = stored(shard_dsns)
    again = (await api.post("/api/v1/jobs:batch", json={"jobs": jobs}, headers=A)).json()["results"]
    assert [x["status"] for x in first] == [201] * 300
    assert [x["status"] for x in again] == [200] * 300
    assert [x["jobId"] for x in again] == [x["jobId"] for x in first]
    assert stored(shard_dsns) == before and len(before) == 300 and key_count(shard_dsns) == 300
    # Keys are per owner: B's same batch is B's own 300 jobs.
    other = (await api.post("/api/v1/jobs:batch", json={"jobs": jobs}, headers=B)).json()["results"]
    assert [x["status"] for x in other] == [201] * 300
    assert len(stored(shard_dsns)) == 600


async def test_a_full_batch_of_1000(api: httpx.AsyncClient, shard_dsns: list[str]) -> None:
    jobs = [job(payload={"n": i}, idempotencyKey=f"big-{i}" if i % 2 else None) for i in range(1000)]
    for j in jobs:
        if j["idempotencyKey"] is None:
            del j["idempotencyKey"]
    results = (await api.post("/api/v1/jobs:batch", json={"jobs": jobs}, headers=A)).json()["results"]
    assert [x["status"] for x in results] == [201] * 1000
    assert len(stored(shard_dsns)) == 1000


@pytest.fixture
def own_shard() -> Iterator[PgServer]:
    """A shard server of this test's own, so that it can be stopped."""
    base = make_base_dir("vakit-test-batch-")
    server = start_pg(base, "shard1")
    try:
        server.create_database("vakit")
        migrate_shard(server.dsn_for("vakit"), 1)
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


async def test_a_stopped_shard_fails_its_jobs_only(shard_dsns: list[str], own_shard: PgServer) -> None:
    dsns = [shard_dsns[0], own_shard.dsn_for("vakit")]
    settings = settings_for(dsns, connect_timeout=1.0)
    async for api in client_for(settings):
        # Both shards serve first (the pool holds live connections to both).
        warm = [job(payload={"w": i}) for i in range(20)]
        ok = (await api.post("/api/v1/jobs:batch", json={"jobs": warm}, headers=A)).json()["results"]
        assert {x["status"] for x in ok} == {201}
        own_shard.stop("immediate")
        jobs = [job(payload={"n": i}) for i in range(30)]
        jobs += [job(payload={"k": i}, idempotencyKey=f"key-{i}") for i in range(30)]
        r = await api.post("/api/v1/jobs:batch", json={"jobs": jobs}, headers=A)
        assert r.status_code == 200
        results = r.json()["results"]
        shards = shardmap.ShardMap(2)
        by_status: dict[int, list[dict[str, Any]]] = {}
        for x in results:
            by_status.setdefault(x["status"], []).append(x)
        assert set(by_status) == {201, 503}
        for x in by_status[503]:
            assert x["problem"]["title"] == "Shard unavailable" and x["problem"]["shard"] == 1
        for x in by_status[201]:
            assert shards.shard_of(shardmap.decode_id("job", x["jobId"])) == 0
        # Keyed jobs route by their key: those whose key lives on shard 1 failed.
        for i in range(30):
            slot = shardmap.key_slot("svc-a", f"key-{i}")
            assert results[30 + i]["status"] == (503 if shards.shard_of_slot(slot) == 1 else 201)
        created = {shardmap.decode_id("job", x["jobId"]) for x in by_status[201]}
        on_zero = {jid for jid, (shard, _, _) in stored([shard_dsns[0]]).items()}
        assert created <= on_zero
