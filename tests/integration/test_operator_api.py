"""The operators' endpoints against real PostgreSQL shards: search filters,
pages across shards while one shard is stopped, retry (same id, the old
attempt fenced), backfill twice (each slot once), and a cron paused then
resumed under each misfire policy (the materializer on a fake clock)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

import shardmap
from cluster.clock import FakeClock
from cluster.leader.materializer import Materializer
from cluster.local.pgserver import PgServer
from cluster.model import ClaimParams, FinishParams, JobResult, Outcome, ReapParams
from cluster.store.migrate import migrate_shard
from cluster.store.postgres import PgStore
from cluster.store.postgres_cron import PgCronStore
from tests.helpers import cron_record
from tests.integration.test_api import A, B, body, client_for, settings_for
from tests.pgfixtures import make_base_dir, start_pg

pytestmark = pytest.mark.integration
SHARDS = shardmap.ShardMap(2)


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


@pytest.fixture
async def store(shard_dsns: list[str]) -> AsyncIterator[PgStore]:
    s = PgStore(shard_dsns, max_size=2, timeout=3.0)
    await s.open()
    yield s
    await s.close()


@pytest.fixture
async def api(shard_dsns: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    async for client in client_for(settings_for(shard_dsns)):
        yield client


def shard_of(job_id: str) -> int:
    return SHARDS.shard_of(shardmap.decode_id("job", job_id))


def key_on(shard: int, n: int, owner: str = "svc-a") -> str:
    """An Idempotency-Key whose job lives on ``shard`` (the n-th such key)."""
    keys = (f"k-{shard}-{i}" for i in range(10_000))
    found = [k for k in keys if SHARDS.shard_of_slot(shardmap.key_slot(owner, k)) == shard]
    return found[n]


async def create(
    api: httpx.AsyncClient, headers: dict[str, str] = A, key: str | None = None, **over: Any
) -> str:
    extra = {"Idempotency-Key": key} if key is not None else {}
    r = await api.post("/api/v1/jobs", json=body(**over), headers={**headers, **extra})
    assert r.status_code == 201, r.text
    return str(r.json()["jobId"])


async def fail_due(store: PgStore, error: str = "HTTP 404") -> int:
    """A worker claims every job due now and records a permanent failure of each."""
    failed = 0
    for shard in range(SHARDS.shard_count):
        claimed = await store.claim_jobs(shard, ClaimParams("w1", 100, 30, 0, prefetch_seconds=1))
        now = datetime.now(UTC)
        results = tuple(JobResult(c.lease, Outcome.FAILED, "w1", now, 0.0, error) for c in claimed)
        failed += len(await store.finish_jobs(shard, FinishParams(results)))
    return failed


async def all_pages(api: httpx.AsyncClient, query: str, limit: int = 2) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = ""
    while True:
        r = await api.get(f"/api/v1/jobs?{query}&limit={limit}&cursor={cursor}", headers=A)
        assert r.status_code == 200, r.text
        items += r.json()["items"]
        cursor = r.json()["nextCursor"]
        if cursor is None:
            return items


async def test_search_filters_across_shards_and_tables(api: httpx.AsyncClient, store: PgStore) -> None:
    now = datetime.now(UTC)
    # Keys that route to both shards: the pages must merge them.
    due = [await create(api, key=key_on(i % 2, i), runAt=iso(now), type="SETTLE") for i in range(4)]
    assert await fail_due(store) == 4
    due += [await create(api, runAt=iso(now + timedelta(minutes=2)), type="SETTLE") for _ in range(2)]
    later = await create(api, runAt=iso(now + timedelta(minutes=10)))
    far = await create(api, runAt=iso(now + timedelta(days=2)))
    await create(api, B, runAt=iso(now))  # another owner's
    cancelled = await create(api, runAt=iso(now + timedelta(minutes=20)))
    assert (await api.delete(f"/api/v1/jobs/{cancelled}", headers=A)).status_code == 200
    assert {shard_of(j) for j in due[:4]} == {0, 1}  # the dead letters are on both shards

    everything = await all_pages(api, "")
    ids = [j["jobId"] for j in everything]
    assert sorted(ids) == sorted([*due, later, far, cancelled]) and len(set(ids)) == len(ids)
    assert ids == sorted(ids, key=lambda t: shardmap.decode_id("job", t), reverse=True)
    failed = await all_pages(api, "status=FAILED")
    assert sorted(j["jobId"] for j in failed) == sorted(due[:4])
    assert {j["lastError"] for j in failed} == {"HTTP 404"}
    both = await all_pages(api, "status=FAILED,CANCELLED")
    assert len(both) == 5
    assert sorted(j["jobId"] for j in await all_pages(api, "type=SETTLE&status=SCHEDULED")) == sorted(due[4:])
    window = f"runAtFrom={iso(now + timedelta(minutes=5))}&runAtTo={iso(now + timedelta(days=1))}"
    assert sorted(j["jobId"] for j in await all_pages(api, window)) == sorted([later, cancelled])
    finished = await all_pages(api, f"finishedFrom={iso(now - timedelta(minutes=1))}")
    assert len(finished) == 5 and all(j["finishedAt"] for j in finished)
    [with_log] = (await api.get("/api/v1/jobs?status=FAILED&limit=1&attempts=true", headers=A)).json()["items"]
    assert [a["outcome"] for a in with_log["attempts"]] == ["ERROR"]


@pytest.fixture(scope="module")
def second_server() -> Iterator[PgServer]:
    """A shard of this module alone: a test stops it."""
    base = make_base_dir("vakit-operator-pg-")
    server = start_pg(base, "shard1")
    server.create_database("vakit")
    migrate_shard(server.dsn_for("vakit"), 1)
    try:
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


async def test_pages_go_on_with_a_shard_stopped(shard_dsns: list[str], second_server: PgServer) -> None:
    dsns = [shard_dsns[0], second_server.dsn_for("vakit")]
    async for api in client_for(settings_for(dsns)):
        made = [await create(api) for _ in range(12)]
        on_zero = {j for j in made if shard_of(j) == 0}
        assert on_zero and len(on_zero) < len(made)
        first = (await api.get("/api/v1/jobs?limit=3", headers=A)).json()
        assert first["missingShards"] == [] and len(first["items"]) == 3
        second_server.stop("fast")
        seen = [j["jobId"] for j in first["items"]]
        cursor = first["nextCursor"]
        while cursor is not None:
            r = await api.get(f"/api/v1/jobs?limit=3&cursor={cursor}", headers=A)
            assert r.status_code == 200, r.text
            assert r.json()["missingShards"] == [1]
            seen += [j["jobId"] for j in r.json()["items"]]
            cursor = r.json()["nextCursor"]
        assert len(seen) == len(set(seen))
        # Every job of the live shard is listed once; none of the stopped one after page 1.
        assert on_zero <= set(seen)
        assert set(seen) - on_zero <= {j["jobId"] for j in first["items"]}
        filtered = await api.get("/api/v1/jobs?status=FAILED", headers=A)
        assert filtered.status_code == 200 and filtered.json()["missingShards"] == [1]


async def test_retry_keeps_the_job_id_and_fences_the_old_attempt(
    api: httpx.AsyncClient, store: PgStore
) -> None:
    job_id = await create(api, runAt=iso(datetime.now(UTC)), maxAttempts=1, timeoutSeconds=1)
    shard = shard_of(job_id)
    [stale] = await store.claim_jobs(shard, ClaimParams("w-stalled", 10, 1, 0, prefetch_seconds=1))
    # The worker stalls past its lease; the reaper gives up on the job.
    reaped = await store.reap_expired(shard, ReapParams(now=datetime.now(UTC) + timedelta(minutes=5)))
    assert reaped.failed == 1
    [dead] = (await api.get("/api/v1/jobs?status=FAILED", headers=A)).json()["items"]
    assert dead["jobId"] == job_id and "lease expired" in dead["lastError"]

    r = await api.post(f"/api/v1/jobs/{job_id}/retry", headers=A)
    assert r.status_code == 200, r.text
    revived = r.json()
    assert (revived["jobId"], revived["status"]) == (job_id, "SCHEDULED")
    assert revived["scheduledFor"] == dead["scheduledFor"]
    # The stalled worker wakes up and reports: fenced, nothing written.
    late = JobResult(stale.lease, Outcome.SUCCEEDED, "w-stalled", datetime.now(UTC), 0.0)
    assert await store.finish_jobs(shard, FinishParams((late,))) == set()
    [fresh] = await store.claim_jobs(shard, ClaimParams("w2", 10, 30, 0, prefetch_seconds=1))
    assert (shardmap.encode_id("job", fresh.id), fresh.attempt) == (job_id, 2)
    ok = JobResult(fresh.lease, Outcome.SUCCEEDED, "w2", datetime.now(UTC), 0.0)
    assert await store.finish_jobs(shard, FinishParams((ok,))) == {fresh.id}
    got = (await api.get(f"/api/v1/jobs/{job_id}", headers=A)).json()
    assert got["status"] == "SUCCEEDED"
    # The reaper ran on a pinned clock 5 minutes ahead: order by attempt only.
    logged = sorted((a["attempt"], a["outcome"]) for a in got["attempts"])
    assert logged == [(1, "LEASE_EXPIRED"), (1, "RETRIED"), (2, "SUCCEEDED")]
    assert (await api.post(f"/api/v1/jobs/{job_id}/retry", headers=A)).status_code == 409


def count(dsns: list[str], query: str, cron_id: Any) -> int:
    total = 0
    for dsn in dsns:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(query, {"id": cron_id}).fetchone()
            total += row[0] if row else 0
    return total


async def test_backfill_twice_gives_each_slot_once(
    api: httpx.AsyncClient, store: PgStore, shard_dsns: list[str]
) -> None:
    cron = {
        "name": "nightly-settlement",
        "schedule": "0 * * * *",
        "timeZone": "UTC",
        "target": {"kind": "HTTP", "url": "https://hooks.example.com/run"},
    }
    cron_id = (await api.post("/api/v1/cron-jobs", json=cron, headers=A)).json()["cronJobId"]
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    night = {"from": iso(hour - timedelta(hours=6)), "to": iso(hour)}
    url = f"/api/v1/cron-jobs/{cron_id}/backfill"
    first = (await api.post(url, json=night, headers=A)).json()
    second = (await api.post(url, json=night, headers=A)).json()
    assert (first["created"], second["created"], second["existing"]) == (6, 0, 6)
    raw = shardmap.decode_id("cron", cron_id)
    assert count(shard_dsns, "SELECT count(*) FROM cron_occurrences WHERE cron_id = %(id)s", raw) == 6
    assert count(shard_dsns, "SELECT count(*) FROM jobs WHERE cron_id = %(id)s", raw) == 6

    # One slot ran; a rerun runs it again as the same job, the others stay.
    shard = SHARDS.shard_of(raw)
    [c, *_] = await store.claim_jobs(shard, ClaimParams("w1", 1, 30, 0, prefetch_seconds=1))
    ok = JobResult(c.lease, Outcome.SUCCEEDED, "w1", datetime.now(UTC), 0.0)
    await store.finish_jobs(shard, FinishParams((ok,)))
    rerun = (await api.post(url, json={**night, "rerun": True}, headers=A)).json()
    assert (rerun["created"], rerun["rerun"], rerun["existing"]) == (0, 1, 5)
    [again] = [s for s in rerun["slots"] if s["outcome"] == "rerun"]
    assert again["jobId"] == shardmap.encode_id("job", c.id) and again["status"] == "SUCCEEDED"
    assert count(shard_dsns, "SELECT count(*) FROM jobs WHERE cron_id = %(id)s", raw) == 6
    assert count(shard_dsns, "SELECT count(*) FROM cron_occurrences WHERE cron_id = %(id)s", raw) == 6


# RUN_ALL runs the 9 late slots of the pause and the 2 timely ones; RUN_ONCE
# the latest late one and the timely ones (8 missed); SKIP the timely ones
# (9 missed).
@pytest.mark.parametrize(
    ("policy", "created", "missed"), [("RUN_ALL", 11, 0), ("RUN_ONCE", 3, 8), ("SKIP", 2, 9)]
)
async def test_pause_then_resume_follows_the_misfire_policy(
    api: httpx.AsyncClient, store: PgStore, policy: str, created: int, missed: int
) -> None:
    # The next slot is a minute at least 30 s away, so the pause (at the
    # database's now) comes before it and withdraws it.
    slot = (datetime.now(UTC) + timedelta(seconds=90)).replace(second=0, microsecond=0)
    c = cron_record("svc-a", f"every-minute-{policy}", next_fire_at=slot, schedule="* * * * *",
                    misfire_policy=policy)  # fmt: skip
    crons = PgCronStore(store)
    shard = SHARDS.shard_of(c.id)
    await crons.create(shard, c)
    clock = FakeClock(slot - timedelta(seconds=30))
    m = Materializer(crons, clock=clock, max_clock_skew_seconds=None)
    assert await m.run_once(shard) == 1  # the slot is materialized ahead
    r = await api.post(f"/api/v1/cron-jobs/{c.id_text}/pause", json={"reason": "db migration"}, headers=A)
    assert r.status_code == 200 and r.json()["paused"], r.text
    assert r.json()["nextFireAt"] == iso(slot)  # withdrawn: it will be decided on resume
    assert (await api.get(f"/api/v1/jobs?cronJobId={c.id_text}", headers=A)).json()["items"] == []
    clock.advance(timedelta(minutes=10))
    assert await m.run_once(shard) == 0  # paused: nothing
    listed = (await api.get("/api/v1/cron-jobs", headers=A)).json()["items"]
    assert [x["pauseReason"] for x in listed] == ["db migration"]
    assert (await api.post(f"/api/v1/cron-jobs/{c.id_text}/resume", headers=A)).status_code == 200
    assert await m.run_once(shard) == created
    got = (await api.get(f"/api/v1/cron-jobs/{c.id_text}", headers=A)).json()
    assert (got["paused"], got["missedCount"]) == (False, missed)
    jobs = (await api.get(f"/api/v1/jobs?cronJobId={c.id_text}&limit=100", headers=A)).json()["items"]
    assert len(jobs) == created
