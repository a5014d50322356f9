"""``vakit calendars``: business-day calendars that crons follow (issue 45).

``create`` and ``update`` take the days as options (``--exclude``,
``--include``, repeated or comma-separated), from a file of ISO dates one a
line (``--exclude-file``), or from an iCalendar file (``--exclude-ics``:
its all-day events, RFC 5545), so a holiday feed can be loaded as it is.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import click

from cluster.cli_client.api_command import Call, api_command, quote_segment

__all__ = ["calendars", "ics_all_day_dates"]

COLUMNS = ("name", "timeZone", "version", "businessWeek", "excludeDates", "includeDates")
# An iCalendar file may be big; a calendar holds at most 2,000 dates anyway.
_MAX_ICS_BYTES = 4 * 1024 * 1024
_ICS_DATE = re.compile(r"^(DTSTART|DTEND)(;[^:]*)?:(\d{8})(T\S*)?$")


@click.group()
def calendars() -> None:
    """Business-day calendars: holidays, working weekends, the business week."""


def _days_options(f: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "--time-zone", "time_zone", required=True, help="IANA zone, e.g. Europe/Istanbul."
            ),
            click.option(
                "--exclude", multiple=True, help="Days not worked (YYYY-MM-DD, or a comma list)."
            ),
            click.option(
                "--include", multiple=True, help="Days worked although the week says not."
            ),
            click.option(
                "--exclude-file",
                type=click.Path(exists=True, dir_okay=False),
                help="ISO dates, one a line (# comments).",
            ),
            click.option(
                "--exclude-ics",
                type=click.Path(exists=True, dir_okay=False),
                help="An iCalendar file: its all-day events are excluded.",
            ),
            click.option(
                "--holidays",
                "holidays_of",
                metavar="COUNTRY[-SUBDIVISION]",
                help="Exclude a country's public holidays (ISO 3166 code, e.g. TR, US-CA), "
                "from the holidays package, for --years.",
            ),
            click.option(
                "--years",
                metavar="YEAR[,YEAR...]",
                help="The years --holidays covers (default: this year and the next).",
            ),
            click.option(
                "--week",
                default="MON,TUE,WED,THU,FRI",
                show_default=True,
                help="The business week.",
            ),
            click.option("--description", help="A note for people."),
        ]
    ):
        f = option(f)
    return f


def _body(time_zone: str, exclude: tuple[str, ...], include: tuple[str, ...],
          exclude_file: str | None, exclude_ics: str | None, holidays_of: str | None,
          years: str | None, week: str, description: str | None) -> dict[str, Any]:  # fmt: skip
    excluded = _split(exclude)
    if years and not holidays_of:
        raise click.UsageError("--years goes with --holidays")
    if holidays_of:
        excluded += [d.isoformat() for d in public_holidays(holidays_of, _years(years))]
    if exclude_file:
        lines = Path(exclude_file).read_text().splitlines()
        excluded += [ln.split("#")[0].strip() for ln in lines if ln.split("#")[0].strip()]
    if exclude_ics:
        raw = Path(exclude_ics).read_bytes()[: _MAX_ICS_BYTES + 1]
        if len(raw) > _MAX_ICS_BYTES:
            raise click.UsageError(f"{exclude_ics} is over {_MAX_ICS_BYTES} bytes")
        excluded += [d.isoformat() for d in ics_all_day_dates(raw.decode("utf-8", "replace"))]
    body: dict[str, Any] = {
        "timeZone": time_zone,
        "excludeDates": sorted(set(excluded)),
        "includeDates": sorted(set(_split(include))),
        "businessWeek": [d.strip().upper() for d in week.split(",") if d.strip()],
    }
    if description is not None:
        body["description"] = description
    return body


def _split(values: tuple[str, ...]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _years(text: str | None) -> list[int]:
    if not text:
        this = date.today().year
        return [this, this + 1]
    try:
        years = sorted({int(y) for y in _split((text,))})
    except ValueError:
        raise click.UsageError(f"--years takes years such as 2027,2028, not {text!r}") from None
    if not years or years[0] < 1900 or years[-1] > 2200 or len(years) > 50:
        raise click.UsageError("--years: up to 50 years between 1900 and 2200")
    return years


def public_holidays(country: str, years: list[int]) -> list[date]:
    """The public holidays of ``country`` (``TR``, or ``US-CA`` for a
    subdivision) in ``years``, as the ``holidays`` package knows them: its
    PUBLIC category only (a half day or an optional holiday is a working day
    unless listed with --exclude)."""
    try:
        import holidays
    except ImportError:  # the `calendars` extra is not installed
        raise click.UsageError(
            "--holidays needs the holidays package: pip install 'vakit[calendars]'"
        ) from None
    code, _, subdivision = country.strip().upper().partition("-")
    known = holidays.list_supported_countries()
    if code not in known:
        raise click.UsageError(f"--holidays: no holidays known for country {code!r}")
    if subdivision and subdivision not in known[code]:
        shown = ", ".join(known[code][:40]) or "none"
        raise click.UsageError(
            f"--holidays {country}: {code} has no subdivision {subdivision!r} (known: {shown})"
        )
    found = holidays.country_holidays(code, subdiv=subdivision or None, years=years)
    return sorted(found.keys())


def ics_all_day_dates(text: str) -> list[date]:
    """The days of an iCalendar file's all-day events (``DTSTART;VALUE=DATE``),
    each event's DTEND exclusive as RFC 5545 says. Timed events and
    recurrence rules are refused: a holiday feed has neither."""
    # Unfold continuation lines (RFC 5545 3.1) before reading properties.
    lines = re.sub(r"\r?\n[ \t]", "", text).splitlines()
    found: set[date] = set()
    start: date | None = None
    end: date | None = None
    for line in lines:
        upper = line.strip().upper()
        if upper == "BEGIN:VEVENT":
            start = end = None
        elif upper.startswith("RRULE"):
            raise click.UsageError("the iCalendar file has recurring events (RRULE): list each day")
        elif upper == "END:VEVENT":
            if start is None:
                raise click.UsageError("an event of the iCalendar file has no DTSTART")
            stop = end if end is not None and end > start else start + timedelta(days=1)
            while start < stop:
                found.add(start)
                start += timedelta(days=1)
        else:
            match = _ICS_DATE.match(upper)
            if match is None:
                continue
            if match[4]:
                raise click.UsageError(f"only all-day events can be imported, not {line.strip()!r}")
            day = date(int(match[3][:4]), int(match[3][4:6]), int(match[3][6:]))
            if match[1] == "DTSTART":
                start = day
            else:
                end = day
    return sorted(found)


@api_command(calendars, "create")
@click.argument("name")
@_days_options
def calendars_create(call: Call, name: str, **days: Any) -> None:
    """Define calendar NAME (the same days again: no change)."""
    call.emit(
        call.api.request("POST", "/api/v1/calendars", body={"name": name, **_body(**days)}), COLUMNS
    )


@api_command(calendars, "update")
@click.argument("name")
@_days_options
def calendars_update(call: Call, name: str, **days: Any) -> None:
    """Replace calendar NAME's days: a new version."""
    path = f"/api/v1/calendars/{quote_segment(name)}"
    call.emit(call.api.request("PUT", path, body=_body(**days)), COLUMNS)


@api_command(calendars, "get")
@click.argument("name")
def calendars_get(call: Call, name: str) -> None:
    """Calendar NAME, its latest version."""
    call.emit(call.api.request("GET", f"/api/v1/calendars/{quote_segment(name)}"), COLUMNS)


@api_command(calendars, "list")
def calendars_list(call: Call) -> None:
    """Your calendars by name."""
    items: list[Any] = []
    params: dict[str, Any] = {"limit": 500}
    for _ in range(1000):
        page = call.api.request("GET", "/api/v1/calendars", params=params)
        items += page["items"]
        if not page.get("nextCursor"):
            break
        params["after"] = page["nextCursor"]
    call.emit(items, COLUMNS)


@api_command(calendars, "delete")
@click.argument("name")
def calendars_delete(call: Call, name: str) -> None:
    """Delete calendar NAME (refused while cron jobs follow it)."""
    call.api.request("DELETE", f"/api/v1/calendars/{quote_segment(name)}")
    click.echo(f"calendar {name} deleted")
