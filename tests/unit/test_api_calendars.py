"""Calendars over HTTP (issue 45): create, read, replace, list and delete,
their 4xx answers, each owner's own, and what the OpenAPI document says.

Responses are checked against the OpenAPI document by the conformance hooks
of ``serve`` (tests/openapi_conformance.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from cluster.api.app import create_app
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from tests.helpers import cron_record
from tests.unit.test_api_fast import PROBLEM, A, B, serve, settings

pytestmark = pytest.mark.asyncio

TURKEY_2027 = {
    "name": "tr-2027",
    "timeZone": "Europe/Istanbul",
    "excludeDates": ["2027-01-01", "2027-04-23"],
    "includeDates": [],
    "businessWeek": ["MON", "TUE", "WED", "THU", "FRI"],
}


@pytest.fixture
def crons() -> MemCronStore:
    return MemCronStore(MemStore(2))


@pytest.fixture
async def client(crons: MemCronStore) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings(), store=crons.store, crons=crons)
    async for c in serve(app):
        yield c


async def test_create_read_replace_list_and_delete(
    client: httpx.AsyncClient, crons: MemCronStore
) -> None:
    created = await client.post("/api/v1/calendars", json=TURKEY_2027, headers=A)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["version"] == 1 and body["excludeDates"] == ["2027-01-01", "2027-04-23"]
    assert body["businessWeek"] == ["MON", "TUE", "WED", "THU", "FRI"]
    # Every shard holds a copy (cluster/services/calendars.py).
    for shard in range(2):
        held = await crons.get_calendar(shard, "svc-a", "tr-2027")
        assert held is not None and held.version == 1

    again = await client.post("/api/v1/calendars", json=TURKEY_2027, headers=A)
    assert again.status_code == 200 and again.json()["version"] == 1
    other = {**TURKEY_2027, "excludeDates": ["2027-05-01"]}
    clash = await client.post("/api/v1/calendars", json=other, headers=A)
    assert clash.status_code == 409 and clash.headers["content-type"].startswith(PROBLEM)

    put = {k: v for k, v in other.items() if k != "name"}
    put["includeDates"] = ["2027-01-09"]
    replaced = await client.put("/api/v1/calendars/tr-2027", json=put, headers=A)
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["version"] == 2
    assert replaced.json()["includeDates"] == ["2027-01-09"]
    same = await client.put("/api/v1/calendars/tr-2027", json=put, headers=A)
    assert same.json()["version"] == 2  # the same days: no new version

    got = await client.get("/api/v1/calendars/tr-2027", headers=A)
    assert got.json()["excludeDates"] == ["2027-05-01"]
    await client.post("/api/v1/calendars", json={**TURKEY_2027, "name": "a-first"}, headers=A)
    listed = await client.get("/api/v1/calendars", headers=A)
    assert [c["name"] for c in listed.json()["items"]] == ["a-first", "tr-2027"]
    page = await client.get("/api/v1/calendars?limit=1", headers=A)
    assert page.json()["nextCursor"] == "a-first"

    # Another owner sees none of them.
    assert (await client.get("/api/v1/calendars/tr-2027", headers=B)).status_code == 404
    assert (await client.get("/api/v1/calendars", headers=B)).json()["items"] == []

    deleted = await client.delete("/api/v1/calendars/tr-2027", headers=A)
    assert deleted.status_code == 204
    assert (await client.get("/api/v1/calendars/tr-2027", headers=A)).status_code == 404
    assert (await client.delete("/api/v1/calendars/tr-2027", headers=A)).status_code == 404
    names = [c["name"] for c in (await client.get("/api/v1/calendars", headers=A)).json()["items"]]
    assert names == ["a-first"]
    # Made again, it continues the versions: a late copy of the old one cannot win.
    remade = await client.post("/api/v1/calendars", json=TURKEY_2027, headers=A)
    assert remade.status_code == 201 and remade.json()["version"] == 4


async def test_a_calendar_that_crons_follow_cannot_be_deleted(
    client: httpx.AsyncClient, crons: MemCronStore
) -> None:
    await client.post("/api/v1/calendars", json=TURKEY_2027, headers=A)
    soon = datetime.now(UTC) + timedelta(hours=1)
    follower = cron_record("svc-a", "payroll", next_fire_at=soon, calendar="tr-2027")
    await crons.create(1, follower)
    refused = await client.delete("/api/v1/calendars/tr-2027", headers=A)
    assert refused.status_code == 409, refused.text
    assert "payroll" in refused.json()["detail"]
    assert (await client.get("/api/v1/calendars/tr-2027", headers=A)).status_code == 200


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"timeZone": "Mars/Olympus"}, "timeZone", "unknown time zone"),
        ({"excludeDates": ["2027-02-30"]}, "excludeDates", "not an ISO date"),
        ({"excludeDates": ["27-1-1"]}, "excludeDates", "not an ISO date"),
        ({"includeDates": ["2027-01-01"]}, "includeDates", "both excluded and included"),
        ({"businessWeek": ["MON", "FUNDAY"]}, "businessWeek", ""),
        ({"businessWeek": []}, "businessWeek", ""),
        ({"name": "has space"}, "name", ""),
        ({"excludeDates": ["1066-10-14"]}, "excludeDates", "outside the years"),
    ],
)
async def test_bad_calendars_are_refused_with_the_field_named(
    client: httpx.AsyncClient, change: dict[str, Any], field: str, words: str
) -> None:
    got = await client.post("/api/v1/calendars", json={**TURKEY_2027, **change}, headers=A)
    assert got.status_code == 422, got.text
    assert got.headers["content-type"].startswith(PROBLEM)
    assert field in got.text and words in got.text
    assert (await client.get("/api/v1/calendars", headers=A)).json()["items"] == []


async def test_the_openapi_document_describes_calendars(crons: MemCronStore) -> None:
    spec = create_app(settings(), store=crons.store, crons=crons).openapi()
    paths = spec["paths"]
    assert set(paths["/api/v1/calendars"]) == {"get", "post"}
    assert set(paths["/api/v1/calendars/{name}"]) == {"get", "put", "delete"}
    assert "409" in paths["/api/v1/calendars/{name}"]["delete"]["responses"]
    schemas = spec["components"]["schemas"]
    create = schemas["CreateCalendarIn"]["properties"]
    assert {"name", "timeZone", "excludeDates", "includeDates", "businessWeek"} <= set(create)
    assert create["businessWeek"]["items"]["enum"] == [
        "MON",
        "TUE",
        "WED",
        "THU",
        "FRI",
        "SAT",
        "SUN",
    ]
    assert create["excludeDates"]["items"]["format"] == "date"
    out = schemas["CalendarOut"]["properties"]
    assert {"version", "excludeDates", "includeDates", "businessWeek", "timeZone"} <= set(out)
