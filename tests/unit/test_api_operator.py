"""The operators' endpoints on the in-memory stores: search and its
validation, retry, bulk retry and cancel, pause and resume of jobs and
crons, and backfill. The same routes run on PostgreSQL in
tests/integration/test_operator_api.py."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

import shardmap
from cluster.api.app import create_app
from cluster.clock import FakeClock
from cluster.model import ClaimParams, FinishParams, JobResult, Outcome
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from tests.unit.test_api_fast import OP, PROBLEM, A, B, body, serve, settings


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime.now(UTC).replace(microsecond=0))


@pytest.fixture
def store(clock: FakeClock) -> MemStore:
    return MemStore(2, clock)


@pytest.fixture
async def api(store: MemStore, clock: FakeClock) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings(), store=store, crons=MemCronStore(store), clock=clock)
    async for client in serve(app):
        yield client


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


async def failed_job(api: httpx.AsyncClient, store: MemStore, clock: FakeClock) -> str:
    """A job created through the API that a worker ran and that failed for good."""
    r = await api.post("/api/v1/jobs", json=body(runAt=iso(clock.now())), headers=A)
    job_id = r.json()["jobId"]
    shard = shardmap.ShardMap(2).shard_of(shardmap.decode_id("job", job_id))
    now = clock.now() + timedelta(seconds=1)
    [c] = await store.claim_jobs(shard, ClaimParams("w1", 10, 30, 0, now=now))
    res = JobResult(c.lease, Outcome.FAILED, "w1", now, 0.0, "HTTP 404 from target")
    await store.finish_jobs(shard, FinishParams((res,), now=now))
    return str(job_id)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=DONE", "status"),
        ("cursor=nope", "cursor"),
        ("runAtFrom=yesterday", "runAtFrom"),
        ("cronJobId=job_01", "cronJobId"),
        ("limit=0", "limit"),
    ],
)
async def test_search_refuses_bad_filters(api: httpx.AsyncClient, query: str, field: str) -> None:
    r = await api.get(f"/api/v1/jobs?{query}", headers=A)
    assert r.status_code == 422 and r.headers["content-type"] == PROBLEM
    assert field in r.text


async def test_dead_letters_are_one_filter_away_and_retry_revives_them(
    api: httpx.AsyncClient, store: MemStore, clock: FakeClock
) -> None:
    dead = await failed_job(api, store, clock)
    await api.post("/api/v1/jobs", json=body(), headers=A)
    await api.post("/api/v1/jobs", json=body(), headers=B)
    page = (await api.get("/api/v1/jobs?status=FAILED&attempts=true", headers=A)).json()
    assert [j["jobId"] for j in page["items"]] == [dead]
    assert page["items"][0]["lastError"] == "HTTP 404 from target"
    assert [a["outcome"] for a in page["items"][0]["attempts"]] == ["ERROR"]
    assert page["nextCursor"] is None and page["missingShards"] == []
    assert len((await api.get("/api/v1/jobs", headers=A)).json()["items"]) == 2
    assert len((await api.get("/api/v1/jobs", headers=B)).json()["items"]) == 1

    r = await api.post(f"/api/v1/jobs/{dead}/retry", headers=A)
    assert r.status_code == 200, r.text
    assert (r.json()["jobId"], r.json()["status"], r.json()["attempt"]) == (dead, "SCHEDULED", 1)
    again = await api.post(f"/api/v1/jobs/{dead}/retry", headers=A)
    assert again.status_code == 409 and again.headers["content-type"] == PROBLEM
    assert (await api.post(f"/api/v1/jobs/{dead}/retry", headers=B)).status_code == 404


async def test_search_pages_with_a_cursor(api: httpx.AsyncClient) -> None:
    for _ in range(5):
        await api.post("/api/v1/jobs", json=body(), headers=A)
    seen: list[str] = []
    cursor = ""
    while True:
        page = (await api.get(f"/api/v1/jobs?limit=2&cursor={cursor}", headers=A)).json()
        seen += [j["jobId"] for j in page["items"]]
        if page["nextCursor"] is None:
            break
        cursor = page["nextCursor"]
    assert len(seen) == len(set(seen)) == 5


async def test_bulk_retry_and_cancel_with_dry_run(
    api: httpx.AsyncClient, store: MemStore, clock: FakeClock
) -> None:
    dead = [await failed_job(api, store, clock) for _ in range(3)]
    dry = (await api.post("/api/v1/jobs:retry", json={"dryRun": True, "limit": 2}, headers=A)).json()
    assert dry["dryRun"] and len(dry["jobIds"]) == 2 and dry["more"]
    assert len((await api.get("/api/v1/jobs?status=FAILED", headers=A)).json()["items"]) == 3
    done = (await api.post("/api/v1/jobs:retry", json={}, headers=A)).json()
    assert sorted(done["jobIds"]) == sorted(dead) and done["failed"] == []
    bad = await api.post("/api/v1/jobs:retry", json={"status": ["SCHEDULED"]}, headers=A)
    assert bad.status_code == 422
    cancelled = (await api.post("/api/v1/jobs:cancel", json={"type": "ORDER_AUTO_CANCEL"}, headers=A)).json()
    assert sorted(cancelled["jobIds"]) == sorted(dead)
    page = (await api.get("/api/v1/jobs?status=CANCELLED", headers=A)).json()
    assert len(page["items"]) == 3
    # Bounded per call: a limit past 1,000 is refused, for both.
    for path in ("/api/v1/jobs:retry", "/api/v1/jobs:cancel"):
        r = await api.post(path, json={"limit": 1001, "dryRun": True}, headers=A)
        assert r.status_code == 422 and "limit" in r.text


async def test_bulk_retry_goes_on_below_a_refused_job(
    api: httpx.AsyncClient, store: MemStore, clock: FakeClock
) -> None:
    # Three dead letters, the newest at the attempt cap: a retry refuses it.
    # Calls of one job each, following nextCursor, meet it once and still
    # reach the two below it.
    dead = [await failed_job(api, store, clock) for _ in range(3)]
    newest = max(dead, key=lambda j: shardmap.decode_id("job", j))
    nid = shardmap.decode_id("job", newest)
    s = store._shard(shardmap.ShardMap(2).shard_of(nid))
    s.history[nid] = dataclasses.replace(s.history[nid], attempt=100)
    retried: list[str] = []
    refused: list[str] = []
    request: dict[str, Any] = {"limit": 1}
    for _ in range(10):
        out = (await api.post("/api/v1/jobs:retry", json=request, headers=A)).json()
        retried += out["jobIds"]
        refused += [f["jobId"] for f in out["failed"]]
        if not out["more"]:
            assert out["nextCursor"] is None
            break
        request["cursor"] = out["nextCursor"]
    assert refused == [newest]
    assert sorted(retried) == sorted(set(dead) - {newest})
    bad = await api.post("/api/v1/jobs:retry", json={"cursor": "nope"}, headers=A)
    assert bad.status_code == 422 and "cursor" in bad.text


async def test_an_operator_searches_an_owner_a_tenant_only_its_own(
    api: httpx.AsyncClient, store: MemStore, clock: FakeClock
) -> None:
    dead = await failed_job(api, store, clock)
    await api.post("/api/v1/jobs", json=body(), headers=B)
    page = (await api.get("/api/v1/jobs?owner=svc-a&status=FAILED", headers=OP)).json()
    assert [j["jobId"] for j in page["items"]] == [dead]
    assert (await api.get("/api/v1/jobs?owner=svc-a", headers=B)).status_code == 403
    done = await api.post("/api/v1/jobs:retry?owner=svc-a", json={"dryRun": True}, headers=OP)
    assert done.status_code == 200 and done.json()["jobIds"] == [dead]


async def test_pause_and_resume_a_job(api: httpx.AsyncClient) -> None:
    job_id = (await api.post("/api/v1/jobs", json=body(), headers=A)).json()["jobId"]
    assert (await api.post(f"/api/v1/jobs/{job_id}/pause", json={}, headers=A)).status_code == 422
    r = await api.post(f"/api/v1/jobs/{job_id}/pause", json={"reason": "vendor outage"}, headers=A)
    assert r.status_code == 200 and r.json()["paused"] and r.json()["pauseReason"] == "vendor outage"
    got = (await api.get(f"/api/v1/jobs/{job_id}", headers=A)).json()
    assert got["paused"] and got["status"] == "SCHEDULED"
    listed = (await api.get("/api/v1/jobs", headers=A)).json()["items"]
    assert listed[0]["paused"]
    r = await api.post(f"/api/v1/jobs/{job_id}/resume", headers=A)
    assert r.status_code == 200 and not r.json()["paused"] and r.json()["pausedAt"] is None


def cron(name: str, **over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "schedule": "0 2 * * *",
        "timeZone": "Europe/Istanbul",
        "target": {"kind": "HTTP", "url": "https://hooks.example.com/run"},
    }
    out.update(over)
    return out


async def test_pause_and_resume_a_cron_are_visible_in_get_and_list(api: httpx.AsyncClient) -> None:
    cron_id = (await api.post("/api/v1/cron-jobs", json=cron("settle"), headers=A)).json()["cronJobId"]
    r = await api.post(f"/api/v1/cron-jobs/{cron_id}/pause", json={"reason": "migration"}, headers=A)
    assert r.status_code == 200 and r.json()["paused"] and r.json()["pauseReason"] == "migration"
    assert (await api.get(f"/api/v1/cron-jobs/{cron_id}", headers=A)).json()["paused"]
    assert (await api.get("/api/v1/cron-jobs", headers=A)).json()["items"][0]["pauseReason"] == "migration"
    assert (await api.post(f"/api/v1/cron-jobs/{cron_id}/pause", json={"reason": "x"}, headers=B)).status_code == 404
    r = await api.post(f"/api/v1/cron-jobs/{cron_id}/resume", headers=A)
    assert r.status_code == 200 and not r.json()["paused"]


async def test_backfill_a_missed_night_once(api: httpx.AsyncClient, clock: FakeClock) -> None:
    cron_id = (await api.post("/api/v1/cron-jobs", json=cron("nightly", timeZone="UTC"), headers=A)).json()[
        "cronJobId"
    ]
    today = clock.now().replace(hour=0, minute=0, second=0)
    night = {"from": iso(today - timedelta(days=3)), "to": iso(today)}
    url = f"/api/v1/cron-jobs/{cron_id}/backfill"
    dry = (await api.post(url, json={**night, "dryRun": True}, headers=A)).json()
    assert dry["dryRun"] and dry["created"] == 3
    assert [s["jobId"] for s in dry["slots"]] == [None] * 3  # nothing was made
    assert (await api.get(f"/api/v1/jobs?cronJobId={cron_id}", headers=A)).json()["items"] == []
    first = (await api.post(url, json=night, headers=A)).json()
    assert (first["created"], first["existing"], first["nextFrom"]) == (3, 0, None)
    assert [s["scheduledFor"][11:] for s in first["slots"]] == ["02:00:00Z"] * 3
    second = (await api.post(url, json=night, headers=A)).json()
    assert (second["created"], second["existing"]) == (0, 3)
    assert [s["jobId"] for s in second["slots"]] == [s["jobId"] for s in first["slots"]]
    jobs = (await api.get(f"/api/v1/jobs?cronJobId={cron_id}", headers=A)).json()["items"]
    assert len(jobs) == 3


async def test_backfill_overlap_skip_refuses_while_an_occurrence_is_pending(
    api: httpx.AsyncClient, clock: FakeClock
) -> None:
    made = await api.post("/api/v1/cron-jobs", json=cron("nightly", timeZone="UTC"), headers=A)
    url = f"/api/v1/cron-jobs/{made.json()['cronJobId']}/backfill"
    today = clock.now().replace(hour=0, minute=0, second=0)
    earlier = {"from": iso(today - timedelta(days=6)), "to": iso(today - timedelta(days=3))}
    night = {"from": iso(today - timedelta(days=1)), "to": iso(today), "overlap": "SKIP"}
    # Nothing pending: SKIP writes as ALLOW does.
    assert (await api.post(url, json=night, headers=A)).json()["created"] == 1
    # Its occurrence is pending (no worker here): SKIP refuses and writes
    # nothing, and its dry run says so; ALLOW writes.
    for dry_run in (True, False):
        refused = await api.post(url, json={**earlier, "overlap": "SKIP", "dryRun": dry_run}, headers=A)
        assert refused.status_code == 409 and refused.headers["content-type"] == PROBLEM
    assert (await api.post(url, json=earlier, headers=A)).json()["created"] == 3


async def test_backfill_is_capped_per_call_and_goes_on_from_next_from(
    api: httpx.AsyncClient, clock: FakeClock
) -> None:
    made = await api.post("/api/v1/cron-jobs", json=cron("minutely", schedule="* * * * *", timeZone="UTC"), headers=A)
    url = f"/api/v1/cron-jobs/{made.json()['cronJobId']}/backfill"
    now = clock.now().replace(second=0)
    whole = {"from": iso(now - timedelta(minutes=1500)), "to": iso(now)}
    cut = iso(now - timedelta(minutes=500))  # the 1,001st slot
    dry = (await api.post(url, json={**whole, "dryRun": True}, headers=A)).json()
    assert (len(dry["slots"]), dry["created"], dry["nextFrom"]) == (1000, 1000, cut)
    first = (await api.post(url, json=whole, headers=A)).json()
    assert (first["created"], first["existing"], first["nextFrom"]) == (1000, 0, cut)
    assert first["slots"][-1]["scheduledFor"] < cut
    rest = (await api.post(url, json={**whole, "from": first["nextFrom"]}, headers=A)).json()
    assert (rest["created"], rest["existing"], rest["nextFrom"]) == (500, 0, None)
    again = (await api.post(url, json=whole, headers=A)).json()
    assert (again["created"], again["existing"]) == (0, 1000)


@pytest.mark.parametrize(
    "override",
    [
        {"to": "2999-01-01T00:00:00Z"},  # the future
        {"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"},  # backwards
        {"overlap": "MAYBE"},
        {"from": "yesterday"},
    ],
)
async def test_backfill_refuses_bad_ranges(api: httpx.AsyncClient, override: dict[str, str]) -> None:
    cron_id = (await api.post("/api/v1/cron-jobs", json=cron("r"), headers=A)).json()["cronJobId"]
    payload = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", **override}
    r = await api.post(f"/api/v1/cron-jobs/{cron_id}/backfill", json=payload, headers=A)
    assert r.status_code == 422 and r.headers["content-type"] == PROBLEM


async def test_backfill_refuses_slots_older_than_the_history_retention(
    api: httpx.AsyncClient, clock: FakeClock
) -> None:
    # The ledger keeps a slot as long as the history does (30 days here):
    # an older slot's run can no longer be told from one that never was.
    made = await api.post("/api/v1/cron-jobs", json=cron("nightly", timeZone="UTC"), headers=A)
    cron_id = made.json()["cronJobId"]
    url = f"/api/v1/cron-jobs/{cron_id}/backfill"
    today = clock.now().replace(hour=0, minute=0, second=0)
    old = {"from": iso(today - timedelta(days=31)), "to": iso(today - timedelta(days=28))}
    r = await api.post(url, json=old, headers=A)
    assert r.status_code == 422 and r.headers["content-type"] == PROBLEM
    assert "retention (30 days)" in r.json()["detail"]
    assert (await api.get(f"/api/v1/jobs?cronJobId={cron_id}", headers=A)).json()["items"] == []
    within = {**old, "from": iso(today - timedelta(days=29))}  # its night at 02:00
    assert (await api.post(url, json=within, headers=A)).json()["created"] == 1
