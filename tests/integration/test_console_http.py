"""The web console's rules over HTTP, against real PostgreSQL shards (in
process, no browser): sign-in and its cookie, CSRF on every action, a
tenant's view (another's job or cron is not found, the cluster is an
operator's), the dead letters' grouping, and ``/docs`` without internet.
The browser tests are in ``test_console_browser.py``."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from cluster.processes import api_app
from cluster.store.postgres import PgStore
from tests.integration.test_api import A, body, settings_for
from tests.integration.test_operator_api import fail_due, iso

pytestmark = pytest.mark.integration
LOOPBACK = ("127.0.0.1", 40000)


@contextlib.asynccontextmanager
async def browser(dsns: list[str], client: tuple[str, int] = LOOPBACK) -> AsyncIterator[httpx.AsyncClient]:
    """A cookie-keeping client as a browser on ``client``'s address."""
    app = api_app(settings_for(dsns))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://vakit") as c:
            yield c


@pytest.fixture
async def ui(shard_dsns: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    async with browser(shard_dsns) as c:
        yield c


def csrf_in(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:500]
    return found.group(1)


async def sign_in(ui: httpx.AsyncClient, token: str) -> httpx.Response:
    page = await ui.get("/ui/signin")
    return await ui.post("/ui/signin", data={"csrf": csrf_in(page.text), "token": token, "next": "/ui/jobs"})


def cookie_attrs(response: httpx.Response, name: str) -> set[str]:
    for header in response.headers.get_list("set-cookie"):
        if header.startswith(f"{name}="):
            return {part.strip().lower() for part in header.split(";")[1:]}
    raise AssertionError(f"no {name} cookie in {response.headers.get_list('set-cookie')}")


async def test_sign_in_sets_a_strict_http_only_cookie_and_sign_out_clears_it(
    ui: httpx.AsyncClient,
) -> None:
    r = await ui.get("/ui/jobs?status=FAILED")
    assert r.status_code == 303
    assert r.headers["location"] == "/ui/signin?next=%2Fui%2Fjobs%3Fstatus%3DFAILED"
    r = await sign_in(ui, "not-a-token")
    assert r.status_code == 401 and "not known" in r.text and "vakit_session" not in ui.cookies
    r = await sign_in(ui, "token-a")
    assert r.status_code == 303 and r.headers["location"] == "/ui/jobs"
    attrs = cookie_attrs(r, "vakit_session")
    assert {"httponly", "samesite=strict", "path=/"} <= attrs
    assert "secure" not in attrs  # plain HTTP on loopback only: see the next test
    page = await ui.get("/ui/jobs")
    assert page.status_code == 200 and "svc-a" in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    r = await ui.post("/ui/signout", data={"csrf": csrf_in(page.text)})
    assert r.status_code == 303 and "max-age=0" in cookie_attrs(r, "vakit_session")
    assert (await ui.get("/ui/jobs")).status_code == 303  # signed out


async def test_the_cookie_is_secure_unless_the_browser_is_on_loopback(shard_dsns: list[str]) -> None:
    async with browser(shard_dsns, client=("10.1.2.3", 40000)) as remote:
        page = await remote.get("/ui/signin")
        assert "secure" in cookie_attrs(page, "vakit_csrf")
        csrf = csrf_in(page.text)
        # A client keeps a Secure cookie to itself over plain HTTP: sent by hand.
        r = await remote.post(
            "/ui/signin", data={"csrf": csrf, "token": "token-a"}, headers={"Cookie": f"vakit_csrf={csrf}"}
        )
        assert r.status_code == 303
        assert {"secure", "httponly", "samesite=strict"} <= cookie_attrs(r, "vakit_session")


async def test_every_action_needs_the_csrf_token_and_changes_nothing_without_it(
    ui: httpx.AsyncClient,
) -> None:
    page = await ui.get("/ui/signin")
    r = await ui.post("/ui/signin", data={"token": "token-a"})  # no CSRF field
    assert r.status_code == 403 and "vakit_session" not in ui.cookies
    assert (await sign_in(ui, "token-a")).status_code == 303
    created = await ui.post(
        "/api/v1/cron-jobs", headers=A,
        json={"name": "nightly", "schedule": "0 2 * * *", "timeZone": "Europe/Istanbul",
              "target": {"kind": "HTTP", "url": "https://hooks.example.com/x"}},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    cron = created.json()["cronJobId"]
    page = await ui.get(f"/ui/crons/{cron}")
    good = csrf_in(page.text)
    for form in ({}, {"csrf": "forged"}, {"csrf": good[:-1] + ("x" if good[-1] != "x" else "y")}):
        r = await ui.post(f"/ui/crons/{cron}/pause", data={**form, "reason": "x"})
        assert r.status_code == 403 and "CSRF" in r.text
    r = await ui.post(f"/ui/crons/{cron}/trigger", data={"csrf": "forged"})
    assert r.status_code == 403
    after = (await ui.get(f"/api/v1/cron-jobs/{cron}", headers=A)).json()
    assert after["paused"] is False
    runs = (await ui.get(f"/api/v1/cron-jobs/{cron}/runs", headers=A)).json()["runs"]
    assert runs == []  # the forged trigger made nothing
    r = await ui.post(f"/ui/crons/{cron}/pause", data={"csrf": good, "reason": "maintenance"})
    assert r.status_code == 303 and r.headers["location"].endswith("?flash=paused")
    after = (await ui.get(f"/api/v1/cron-jobs/{cron}", headers=A)).json()
    assert after["paused"] is True and after["pauseReason"] == "maintenance"


async def test_a_tenant_sees_only_its_own_and_the_cluster_is_an_operators(
    ui: httpx.AsyncClient,
) -> None:
    r = await ui.post("/api/v1/jobs", json=body(), headers=A)
    assert r.status_code == 201
    job = r.json()["jobId"]
    assert (await sign_in(ui, "token-b")).status_code == 303
    page = await ui.get(f"/ui/jobs/{job}")
    assert page.status_code == 404 and "no such job" in page.text
    assert job not in (await ui.get("/ui/jobs")).text
    assert (await ui.get(f"/ui/jobs/{job}/state")).status_code == 404
    forged = await ui.post(f"/ui/jobs/{job}/cancel", data={"csrf": csrf_in(page.text)})
    assert forged.status_code == 404
    assert (await ui.get(f"/api/v1/jobs/{job}", headers=A)).json()["status"] == "SCHEDULED"
    assert (await ui.get("/ui/cluster")).status_code == 403
    assert (await sign_in(ui, "token-a")).status_code == 303
    mine = await ui.get(f"/ui/jobs/{job}")
    assert mine.status_code == 200 and 'id="cancel"' in mine.text
    assert "hx-trigger" not in mine.text  # due in 5 minutes: the page does not poll yet
    assert (await sign_in(ui, "token-op")).status_code == 303
    cluster = await ui.get("/ui/cluster")
    assert cluster.status_code == 200 and cluster.text.count("<tr>") >= 2  # a row per shard


async def test_dead_letters_group_failed_jobs_by_type_and_error(
    ui: httpx.AsyncClient, store: PgStore
) -> None:
    now = iso(datetime.now(UTC))
    for kind in ("SETTLE", "SETTLE", "SETTLE", "REPORT"):
        assert (await ui.post("/api/v1/jobs", json=body(runAt=now, type=kind), headers=A)).status_code == 201
    assert await fail_due(store, "HTTP 404") == 4
    assert (await sign_in(ui, "token-a")).status_code == 303
    page = await ui.get("/ui/dead-letters")
    assert page.status_code == 200
    rows = re.findall(r"<tr>\s*<td><a[^>]*>(\w+)</a></td><td>([^<]*)</td><td>(\d+)</td>", page.text)
    assert sorted(rows) == [("REPORT", "HTTP 404", "1"), ("SETTLE", "HTTP 404", "3")]
    failed = await ui.get("/ui/jobs?status=FAILED&type=SETTLE")
    assert failed.text.count("data-job=") == 3
    window = f"runAtFrom={iso(datetime.now(UTC) - timedelta(minutes=5))}&finishedTo=2100-01-01T00:00:00Z"
    assert (await ui.get(f"/ui/jobs?status=FAILED&{window}")).text.count("data-job=") == 4
    future = await ui.get("/ui/jobs?runAtFrom=2099-01-01T00:00:00Z")
    assert future.status_code == 200 and 'id="no-jobs"' in future.text
    assert (await ui.get("/ui/jobs?finishedFrom=last+week")).status_code == 422
    bad = await ui.get("/ui/jobs?status=NOPE")
    assert bad.status_code == 422 and "is not one of" in bad.text  # the API's problem, as a page


async def test_sign_in_goes_back_only_to_console_pages(ui: httpx.AsyncClient) -> None:
    page = await ui.get("/ui/signin?next=//evil.example/x")
    assert 'value="/ui/crons"' in page.text
    r = await ui.post(
        "/ui/signin", data={"csrf": csrf_in(page.text), "token": "token-a", "next": "https://evil.example"}
    )
    assert r.headers["location"] == "/ui/crons"


async def test_docs_load_nothing_from_outside(ui: httpx.AsyncClient) -> None:
    docs = await ui.get("/docs")
    assert docs.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', docs.text)
    assert assets and all(a.startswith("/ui/static/") for a in assets), assets
    assert "cdn" not in docs.text.lower()
    for asset in assets:
        assert (await ui.get(asset)).status_code == 200, asset
    assert (await ui.get("/redoc")).status_code == 404
    assert (await ui.get("/openapi.json")).status_code == 200


async def test_backfill_shows_its_dry_run_first_and_each_slot_runs_once(ui: httpx.AsyncClient) -> None:
    assert (await sign_in(ui, "token-a")).status_code == 303
    created = await ui.post(
        "/api/v1/cron-jobs", headers=A,
        json={"name": "hourly", "schedule": "0 * * * *", "timeZone": "UTC",
              "target": {"kind": "HTTP", "url": "https://hooks.example.com/x"}},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    cron = created.json()["cronJobId"]
    page = await ui.get(f"/ui/crons/{cron}")
    assert 'id="backfill-form"' in page.text
    csrf = csrf_in(page.text)
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    span = {"from": iso(hour - timedelta(hours=3)), "to": iso(hour - timedelta(hours=1))}
    dry = await ui.post(f"/ui/crons/{cron}/backfill", data={"csrf": csrf, **span})
    assert dry.status_code == 200 and "would create <strong>2</strong>" in dry.text
    assert 'id="backfill-confirm"' in dry.text
    runs = (await ui.get(f"/api/v1/cron-jobs/{cron}/runs", headers=A)).json()["runs"]
    assert runs == []  # the dry run wrote nothing
    done = await ui.post(f"/ui/crons/{cron}/backfill", data={"csrf": csrf, **span, "confirm": "yes"})
    assert done.status_code == 200 and "created <strong>2</strong>" in done.text
    runs = (await ui.get(f"/api/v1/cron-jobs/{cron}/runs", headers=A)).json()["runs"]
    assert sorted(r["scheduledFor"] for r in runs) == [iso(hour - timedelta(hours=h)) for h in (3, 2)]
    again = await ui.post(f"/ui/crons/{cron}/backfill", data={"csrf": csrf, **span, "confirm": "yes"})
    assert "created <strong>0</strong>, left <strong>2</strong>" in again.text
    assert len((await ui.get(f"/api/v1/cron-jobs/{cron}/runs", headers=A)).json()["runs"]) == 2
    bad = await ui.post(f"/ui/crons/{cron}/backfill", data={"csrf": csrf, "from": "yesterday", "to": span["to"]})
    assert bad.status_code == 422 and "from" in bad.text


async def test_a_dead_letter_group_is_retried_after_its_dry_run(
    ui: httpx.AsyncClient, store: PgStore
) -> None:
    now = iso(datetime.now(UTC))
    other = (await ui.post("/api/v1/jobs", json=body(runAt=now, type="SETTLE"), headers=A)).json()["jobId"]
    assert await fail_due(store, "HTTP 410") == 1
    group = [
        (await ui.post("/api/v1/jobs", json=body(runAt=now, type="SETTLE"), headers=A)).json()["jobId"]
        for _ in range(3)
    ]
    assert await fail_due(store, "HTTP 404") == 3
    assert (await sign_in(ui, "token-a")).status_code == 303
    page = await ui.get("/ui/dead-letters")
    form = {"csrf": csrf_in(page.text), "type": "SETTLE", "error": "HTTP 404"}
    dry = await ui.post("/ui/dead-letters/retry", data=form)
    assert dry.status_code == 200 and "these <strong>3</strong> failed jobs" in dry.text
    assert sorted(re.findall(r'<li><a href="/ui/jobs/([^"]+)"', dry.text)) == sorted(group)
    statuses = [(await ui.get(f"/api/v1/jobs/{j}", headers=A)).json()["status"] for j in group]
    assert statuses == ["FAILED"] * 3  # the dry run changed nothing
    done = await ui.post("/ui/dead-letters/retry", data={**form, "confirm": "yes"})
    assert done.status_code == 200 and "Retried <strong>3</strong> of 3" in done.text
    for j in group:
        assert (await ui.get(f"/api/v1/jobs/{j}", headers=A)).json()["status"] == "SCHEDULED"
    assert (await ui.get(f"/api/v1/jobs/{other}", headers=A)).json()["status"] == "FAILED"


async def test_a_scheduled_job_is_rescheduled_and_bad_input_changes_nothing(ui: httpx.AsyncClient) -> None:
    job = (await ui.post("/api/v1/jobs", json=body(), headers=A)).json()["jobId"]
    assert (await sign_in(ui, "token-a")).status_code == 303
    page = await ui.get(f"/ui/jobs/{job}")
    assert 'id="reschedule"' in page.text
    csrf = csrf_in(page.text)
    before = (await ui.get(f"/api/v1/jobs/{job}", headers=A)).json()["runAt"]
    bad = await ui.post(f"/ui/jobs/{job}/reschedule", data={"csrf": csrf, "runAt": "tomorrow"})
    assert bad.status_code == 422 and "runAt" in bad.text
    assert (await ui.get(f"/api/v1/jobs/{job}", headers=A)).json()["runAt"] == before
    later = "2030-06-01T12:00:00Z"
    r = await ui.post(f"/ui/jobs/{job}/reschedule", data={"csrf": csrf, "runAt": later})
    assert r.status_code == 303 and r.headers["location"].endswith("?flash=rescheduled")
    assert (await ui.get(f"/api/v1/jobs/{job}", headers=A)).json()["runAt"] == later


async def test_an_operator_may_show_another_owners_jobs_and_a_tenant_may_not(
    ui: httpx.AsyncClient,
) -> None:
    job = (await ui.post("/api/v1/jobs", json=body(), headers=A)).json()["jobId"]
    assert (await sign_in(ui, "token-b")).status_code == 303
    page = await ui.get("/ui/jobs")
    assert 'id="act-for"' not in page.text
    r = await ui.post("/ui/act-for", data={"csrf": csrf_in(page.text), "owner": "svc-a"})
    assert r.status_code == 403 and "vakit_acting_for" not in ui.cookies
    # A forged choice is ignored for a tenant.
    forged = f"vakit_session={ui.cookies['vakit_session']}; vakit_acting_for=svc-a"
    r = await ui.get(f"/ui/jobs/{job}", headers={"Cookie": forged})
    assert r.status_code == 404 and "svc-b" in r.text  # still signed in, as itself
    assert (await sign_in(ui, "token-op")).status_code == 303
    page = await ui.get("/ui/jobs")
    assert job not in page.text  # the operator's own (none) until it picks an owner
    r = await ui.post("/ui/act-for", data={"csrf": csrf_in(page.text), "owner": "svc-a"})
    assert r.status_code == 303
    page = await ui.get("/ui/jobs")
    assert job in page.text and "showing svc-a" in page.text
    assert (await ui.get(f"/ui/jobs/{job}")).status_code == 200
    r = await ui.post("/ui/act-for", data={"csrf": csrf_in(page.text), "owner": ""})
    assert (await ui.get(f"/ui/jobs/{job}")).status_code == 404  # back to its own


async def test_calendars_are_created_changed_and_deleted_from_the_console(ui: httpx.AsyncClient) -> None:
    assert (await sign_in(ui, "token-a")).status_code == 303
    page = await ui.get("/ui/calendars")
    assert page.status_code == 200 and 'id="no-calendars"' in page.text
    csrf = csrf_in(page.text)
    week = {f"week-{d}": "yes" for d in ("MON", "TUE", "WED", "THU", "FRI")}
    form = {"csrf": csrf, "name": "tr", "timeZone": "Europe/Istanbul", **week,
            "excludeDates": "2027-01-01\r\n2027-04-23, 2027-05-01", "includeDates": ""}  # fmt: skip
    r = await ui.post("/ui/calendars", data=form)
    assert r.status_code == 303 and r.headers["location"] == "/ui/calendars/tr?flash=calendar-created"
    api = (await ui.get("/api/v1/calendars/tr", headers=A)).json()
    assert api["excludeDates"] == ["2027-01-01", "2027-04-23", "2027-05-01"] and api["version"] == 1
    assert api["businessWeek"] == ["MON", "TUE", "WED", "THU", "FRI"]
    page = await ui.get("/ui/calendars/tr")
    assert "<time>2027-04-23</time>" in page.text and 'id="edit-calendar"' in page.text

    # Bad input: the API's own refusal, and nothing changes.
    bad = await ui.post("/ui/calendars/tr/update", data={**form, "excludeDates": "2027-13-01"})
    assert bad.status_code == 422 and "excludeDates" in bad.text  # the API model's own words
    none = await ui.post("/ui/calendars/tr/update", data={"csrf": csrf, "timeZone": "UTC"})
    assert none.status_code == 422  # no business day at all
    assert (await ui.get("/api/v1/calendars/tr", headers=A)).json()["version"] == 1

    # A working Saturday and Saturdays in the week: version 2.
    saved = await ui.post("/ui/calendars/tr/update", data={**form, "week-SAT": "yes",
                                                          "includeDates": "2027-01-10"})  # fmt: skip
    assert saved.status_code == 303 and saved.headers["location"].endswith("flash=calendar-updated")
    api = (await ui.get("/api/v1/calendars/tr", headers=A)).json()
    assert api["version"] == 2 and api["includeDates"] == ["2027-01-10"] and "SAT" in api["businessWeek"]

    # A cron follows it: the cron page links it, and deleting is refused.
    created = await ui.post(
        "/api/v1/cron-jobs", headers=A,
        json={"name": "payroll", "schedule": "0 9 * * MON-FRI", "timeZone": "Europe/Istanbul",
              "target": {"kind": "HTTP", "url": "https://hooks.example.com/x"},
              "calendar": "tr", "calendarPolicy": "NEXT_BUSINESS_DAY"},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    cron = created.json()["cronJobId"]
    page = await ui.get(f"/ui/crons/{cron}")
    assert 'href="/ui/calendars/tr"' in page.text and "NEXT_BUSINESS_DAY" in page.text
    refused = await ui.post("/ui/calendars/tr/delete", data={"csrf": csrf})
    assert refused.status_code == 409 and "payroll" in refused.text
    assert (await ui.delete(f"/api/v1/cron-jobs/{cron}", headers=A)).status_code == 204
    forged = await ui.post("/ui/calendars/tr/delete", data={"csrf": "forged"})
    assert forged.status_code == 403
    gone = await ui.post("/ui/calendars/tr/delete", data={"csrf": csrf})
    assert gone.status_code == 303 and gone.headers["location"] == "/ui/calendars?flash=calendar-deleted"
    assert (await ui.get("/api/v1/calendars/tr", headers=A)).status_code == 404
    # Another owner never sees it (a tenant's view).
    page = await ui.get("/ui/calendars")
    assert 'data-calendar="tr"' not in page.text
