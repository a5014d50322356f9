"""``vakit calendars``: the commands against the real API app (in memory),
and the iCalendar import of all-day events."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
from click.testing import CliRunner

from cluster.api.app import create_app
from cluster.cli import main
from cluster.cli_client.calendars import ics_all_day_dates, public_holidays
from cluster.cli_client.http import ApiClient, ApiError
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from tests.unit.test_api_fast import A, settings

ICS = """BEGIN:VCALENDAR\r
VERSION:2.0\r
BEGIN:VEVENT\r
UID:1\r
DTSTART;VALUE=DATE:20270101\r
SUMMARY:New Year's Day\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:2\r
DTSTART;VALUE=DATE:20270309\r
DTEND;VALUE=DATE:20270312\r
SUMMARY:Ramadan Feast (three days; DTEND is exclusive)\r
END:VEVENT\r
END:VCALENDAR\r
"""


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI's requests served by the API app, in memory, on a loop of its
    own thread (the CLI is synchronous, the app is not)."""
    store = MemStore(2)
    app = create_app(settings(), store=store, crons=MemCronStore(store))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    stop = asyncio.Event()
    clients: list[httpx.AsyncClient] = []
    ready = threading.Event()

    async def serve() -> None:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
                clients.append(client)
                ready.set()
                await stop.wait()

    served = asyncio.run_coroutine_threadsafe(serve(), loop)
    assert ready.wait(10)

    def request(
        self: ApiClient, method: str, path: str, *, params: Any = None, body: Any = None
    ) -> Any:
        call = clients[0].request(method, path, params=params, json=body, headers=A)
        got = asyncio.run_coroutine_threadsafe(call, loop).result(10)
        if got.status_code >= 400:
            raise ApiError(got.status_code, got.json())
        return got.json() if got.content else None

    monkeypatch.setattr(ApiClient, "request", request)
    try:
        yield
    finally:
        loop.call_soon_threadsafe(stop.set)
        served.result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def run(*args: str) -> Any:
    out = CliRunner().invoke(main, [*args, "--api-url", "http://api", "-o", "json"])
    return out


def test_create_update_list_get_delete(api: None, tmp_path: Path) -> None:
    ics = tmp_path / "tr.ics"
    ics.write_text(ICS)
    listed = tmp_path / "more.txt"
    listed.write_text("# public holidays\n2027-04-23\n\n2027-05-01  # Labour Day\n")
    made = run("calendars", "create", "tr", "--time-zone", "Europe/Istanbul",
               "--exclude-ics", str(ics), "--exclude-file", str(listed),
               "--exclude", "2027-07-15,2027-08-30", "--include", "2027-01-09")  # fmt: skip
    assert made.exit_code == 0, made.output
    body = json.loads(made.output)
    assert body["excludeDates"] == [
        "2027-01-01", "2027-03-09", "2027-03-10", "2027-03-11", "2027-04-23",
        "2027-05-01", "2027-07-15", "2027-08-30",
    ]  # fmt: skip
    assert body["includeDates"] == ["2027-01-09"] and body["version"] == 1

    updated = run("calendars", "update", "tr", "--time-zone", "Europe/Istanbul",
                  "--exclude", "2027-01-01", "--week", "MON,TUE,WED,THU,FRI,SAT")  # fmt: skip
    assert updated.exit_code == 0, updated.output
    assert json.loads(updated.output)["version"] == 2
    assert json.loads(updated.output)["businessWeek"][-1] == "SAT"
    assert [c["name"] for c in json.loads(run("calendars", "list").output)] == ["tr"]
    assert json.loads(run("calendars", "get", "tr").output)["excludeDates"] == ["2027-01-01"]

    assert run("calendars", "delete", "tr").exit_code == 0
    missing = run("calendars", "get", "tr")
    assert missing.exit_code == 3  # not found
    bad = run(
        "calendars", "create", "x", "--time-zone", "Europe/Istanbul", "--exclude", "2027-13-01"
    )
    assert bad.exit_code == 1 and "not an ISO date" in bad.output


def test_ics_import_reads_all_day_events_and_refuses_what_it_cannot_read() -> None:
    assert ics_all_day_dates(ICS) == [
        date(2027, 1, 1), date(2027, 3, 9), date(2027, 3, 10), date(2027, 3, 11),
    ]  # fmt: skip
    folded = "BEGIN:VEVENT\r\nDTSTART;VALUE=DA\r\n TE:20270423\r\nEND:VEVENT\r\n"
    assert ics_all_day_dates(folded) == [date(2027, 4, 23)]
    with pytest.raises(click.UsageError, match="all-day"):
        ics_all_day_dates("BEGIN:VEVENT\nDTSTART:20270101T090000Z\nEND:VEVENT\n")
    with pytest.raises(click.UsageError, match="RRULE"):
        ics_all_day_dates(
            "BEGIN:VEVENT\nDTSTART;VALUE=DATE:20270101\nRRULE:FREQ=YEARLY\nEND:VEVENT\n"
        )


def test_a_countrys_public_holidays_come_from_the_holidays_package(api: None) -> None:
    made = run("calendars", "create", "tr", "--time-zone", "Europe/Istanbul",
               "--holidays", "TR", "--years", "2027", "--include", "2027-01-09")  # fmt: skip
    assert made.exit_code == 0, made.output
    body = json.loads(made.output)
    # Turkey's public holidays of 2027: fixed days and the two feasts, which
    # move with the lunar calendar (the package computes them).
    assert body["excludeDates"] == [
        "2027-01-01", "2027-03-09", "2027-03-10", "2027-03-11", "2027-04-23",
        "2027-05-01", "2027-05-16", "2027-05-17", "2027-05-18", "2027-05-19",
        "2027-07-15", "2027-08-30", "2027-10-29",
    ]  # fmt: skip
    # A subdivision's own days: Cesar Chavez Day is California's, not federal.
    federal = public_holidays("US", [2027])
    california = public_holidays("us-ca", [2027])
    assert date(2027, 3, 31) in california and date(2027, 3, 31) not in federal
    assert date(2027, 7, 5) in federal  # Independence Day observed (the 4th is a Sunday)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--holidays", "XX"], "no holidays known for country 'XX'"),
        (["--holidays", "US-ZZ"], "--holidays US-ZZ"),
        (["--holidays", "TR", "--years", "twenty"], "--years takes years"),
        (["--holidays", "TR", "--years", "1066"], "between 1900 and 2200"),
        (["--years", "2027"], "--years goes with --holidays"),
    ],
)
def test_holidays_options_refuse_what_they_cannot_read(args: list[str], words: str) -> None:
    out = run("calendars", "create", "x", "--time-zone", "Europe/Istanbul", *args)
    assert out.exit_code != 0 and words in out.output, out.output
