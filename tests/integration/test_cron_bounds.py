"""A cron's bounds and policies on real PostgreSQL: the API's checks, the
preview, and the bulk materializer honouring endAt and maxRuns."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

import shardmap
from cluster.clock import FakeClock
from cluster.store.postgres import PgStore
from tests.integration.test_api import A, client_for, settings_for
from tests.integration.test_cron import cron_body, materialize_all, occurrences

pytestmark = pytest.mark.integration


@pytest.fixture
async def api(shard_dsns: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    async for client in client_for(settings_for(shard_dsns, allow_private_targets=True)):
        yield client


def every_15(name: str, **over: Any) -> dict[str, Any]:
    return cron_body(
        name=name, schedule="*/15 * * * *", timeZone="UTC", misfirePolicy="RUN_ALL",
        concurrency="ALLOW", jitterSeconds=0, **over,
    )  # fmt: skip


async def test_time_zone_is_required_on_create(api: httpx.AsyncClient) -> None:
    body = cron_body(name="no-zone")
    del body["timeZone"]
    r = await api.post("/api/v1/cron-jobs", json=body, headers=A)
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["detail"].startswith("timeZone:")
    assert [e["field"] for e in problem["errors"]] == ["timeZone"]
    assert (await api.get("/api/v1/cron-jobs", headers=A)).json()["items"] == []
    # The batch door says the same per item.
    r = await api.post("/api/v1/cron-jobs:batch", json={"cronJobs": [body]}, headers=A)
    [result] = r.json()["results"]
    assert result["status"] == 422 and "timeZone" in result["problem"]["detail"]


async def test_bad_bounds_are_422_and_change_nothing(api: httpx.AsyncClient) -> None:
    for over in (
        {"startAt": "2027-02-01T00:00:00Z", "endAt": "2027-01-01T00:00:00Z"},
        {"endAt": "2020-01-01T00:00:00Z"},  # no slot left
        {"startAt": "2027-01-01 00:00"},  # no offset
        {"maxRuns": 0},
        {"monthEndPolicy": "LAST"},
        {"dstPolicy": "TWICE"},
    ):
        r = await api.post("/api/v1/cron-jobs", json=cron_body(name="bad", **over), headers=A)
        assert r.status_code == 422, (over, r.text)
    assert (await api.get("/api/v1/cron-jobs", headers=A)).json()["items"] == []


async def test_start_at_sets_the_first_slot(api: httpx.AsyncClient) -> None:
    r = await api.post(
        "/api/v1/cron-jobs", json=every_15("later", startAt="2031-05-01T10:07:00+02:00"), headers=A
    )
    assert r.status_code == 201, r.text
    cron = r.json()
    assert cron["startAt"] == "2031-05-01T08:07:00Z"
    assert cron["nextFireAt"] == "2031-05-01T08:15:00Z"


async def test_materializer_honours_max_runs_and_end_at(
    api: httpx.AsyncClient, store: PgStore, shard_dsns: list[str]
) -> None:
    capped = (await api.post("/api/v1/cron-jobs", json=every_15("capped", maxRuns=3), headers=A)).json()
    first = datetime.fromisoformat(capped["nextFireAt"])
    ended = (
        await api.post(
            "/api/v1/cron-jobs",
            json=every_15("ended", endAt=(first + timedelta(minutes=30)).isoformat()),
            headers=A,
        )
    ).json()
    free = (await api.post("/api/v1/cron-jobs", json=every_15("free"), headers=A)).json()
    # Down for two hours, RUN_ALL: 9 slots are due for each.
    clock = FakeClock(first + timedelta(hours=2, seconds=30))
    await materialize_all(store, clock)
    made: dict[Any, int] = {}
    for cron_id, _, _ in occurrences(shard_dsns):
        made[cron_id] = made.get(cron_id, 0) + 1

    def count(c: dict[str, Any]) -> int:
        return made.get(shardmap.decode_id("cron", c["cronJobId"]), 0)

    assert (count(capped), count(ended), count(free)) == (3, 3, 9)
    got = {c["name"]: c for c in (await api.get("/api/v1/cron-jobs", headers=A)).json()["items"]}
    assert got["capped"]["runCount"] == 3 and got["capped"]["nextFireAt"] is None
    assert got["ended"]["runCount"] == 3 and got["ended"]["nextFireAt"] is None
    assert got["free"]["runCount"] == 9 and got["free"]["nextFireAt"] is not None
    # Nothing more for the bounded ones, however late it gets.
    clock.advance(timedelta(hours=3))
    await materialize_all(store, clock)
    again = occurrences(shard_dsns)
    ids = {shardmap.decode_id("cron", c["cronJobId"]) for c in (capped, ended)}
    assert sum(1 for cron_id, _, _ in again if cron_id in ids) == 6
    # Raising maxRuns by PATCH starts the cron again.
    r = await api.patch(f"/api/v1/cron-jobs/{capped['cronJobId']}", json={"maxRuns": 5}, headers=A)
    assert r.status_code == 200 and r.json()["nextFireAt"] is not None and r.json()["runCount"] == 3


async def test_preview_shows_policies_and_bounds(api: httpx.AsyncClient) -> None:
    body = cron_body(name="month-end", schedule="0 2 31 * *", monthEndPolicy="CLAMP", maxRuns=3, jitterSeconds=0)
    cid = (await api.post("/api/v1/cron-jobs", json=body, headers=A)).json()["cronJobId"]
    r = await api.get(f"/api/v1/cron-jobs/{cid}/preview?from=2031-01-15T00:00:00Z&count=10", headers=A)
    assert r.status_code == 200, r.text
    preview = r.json()
    assert preview["monthEndPolicy"] == "CLAMP" and preview["dstPolicy"] == "CRONIE"
    assert [f["local"][:16] for f in preview["fires"]] == [
        "2031-01-31T02:00", "2031-02-28T02:00", "2031-03-31T02:00",
    ]  # fmt: skip
    assert preview["fires"][1]["note"] and "February 2031 has no 31st" in preview["fires"][1]["note"]
    assert preview["end"] and "maxRuns 3" in preview["end"]
    # The DST policy, changed by PATCH, shows in the preview too.
    r = await api.patch(
        f"/api/v1/cron-jobs/{cid}",
        json={"schedule": "30 2 * * *", "timeZone": "Europe/Berlin", "dstPolicy": "SKIP", "maxRuns": None},
        headers=A,
    )
    assert r.status_code == 200, r.text
    r = await api.get(f"/api/v1/cron-jobs/{cid}/preview?from=2031-03-29T12:00:00Z&count=2", headers=A)
    # 2031-03-30 is Berlin's spring-forward day: 02:30 does not exist and SKIP drops it.
    fires = r.json()["fires"]
    assert [f["local"][:16] for f in fires] == ["2031-03-31T02:30", "2031-04-01T02:30"]
    assert fires[0]["note"] == "DST gap on 2031-03-30: 02:30 did not exist; not fired (dstPolicy SKIP)"
    # BOTH: Berlin's 2031-10-26 overlap fires 02:30 twice (CEST, then CET), each noted.
    r = await api.patch(f"/api/v1/cron-jobs/{cid}", json={"dstPolicy": "BOTH"}, headers=A)
    assert r.status_code == 200 and r.json()["dstPolicy"] == "BOTH", r.text
    r = await api.get(f"/api/v1/cron-jobs/{cid}/preview?from=2031-10-25T12:00:00Z&count=3", headers=A)
    preview = r.json()
    assert preview["dstPolicy"] == "BOTH"
    assert [f["local"] for f in preview["fires"]] == [
        "2031-10-26T02:30:00+02:00", "2031-10-26T02:30:00+01:00", "2031-10-27T02:30:00+01:00",
    ]  # fmt: skip
    assert [bool(f["note"] and "DST overlap" in f["note"]) for f in preview["fires"]] == [True, True, False]
