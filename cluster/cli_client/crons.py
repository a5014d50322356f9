"""``vakit crons``: define, inspect and run cron jobs on the API, finding a
cron by id or by name. Keeping them as code (``apply``, ``lint``) is
:mod:`cluster.cli_client.crons_as_code`.
"""

from __future__ import annotations

import json
from typing import Any

import click
import yaml

from cluster.cli_client.api_command import (
    Call,
    F,
    NotFoundError,
    api_command,
    every_item,
    quote_segment,
)
from cluster.targets.kinds import KINDS
from cluster.targets.registry import CliOption

__all__ = ["CRON_COLUMNS", "all_crons", "crons", "find_cron_id"]

CRON_COLUMNS = (
    "cronJobId", "name", "schedule", "timeZone", "enabled", "paused", "nextFireAt", "runCount",
    "missedCount",
)  # fmt: skip


@click.group()
def crons() -> None:
    """Define, inspect and run cron jobs; keep them as code (apply, lint)."""


def all_crons(call: Call) -> list[dict[str, Any]]:
    return list(every_item(call, "/api/v1/cron-jobs", {"limit": 500}, "items", "after"))


def find_cron_id(call: Call, ref: str) -> str:
    """A cron by id (``cron_…``) or by name."""
    if ref.startswith("cron_"):
        return ref
    for cron in all_crons(call):
        if cron["name"] == ref:
            return str(cron["cronJobId"])
    raise NotFoundError(f"no cron job named {ref!r}")


@api_command(crons, "list")
@click.option(
    "--limit",
    type=click.IntRange(1, 500),
    default=None,
    help="One page of this many (default: all).",
)
@click.option("--after", default=None, help="The name to start after (a page's nextCursor).")
def crons_list(call: Call, limit: int | None, after: str | None) -> None:
    """The owner's cron jobs by name."""
    if limit is None:
        items = list(
            every_item(call, "/api/v1/cron-jobs", {"limit": 500, "after": after}, "items", "after")
        )
        call.emit({"items": items, "nextCursor": None}, CRON_COLUMNS, items)
        return
    page = call.api.request("GET", "/api/v1/cron-jobs", params={"limit": limit, "after": after})
    call.emit(page, CRON_COLUMNS, page["items"])


@api_command(crons, "get")
@click.argument("cron")
def crons_get(call: Call, cron: str) -> None:
    """A cron job, by id or name."""
    got = call.api.request("GET", f"/api/v1/cron-jobs/{quote_segment(find_cron_id(call, cron))}")
    if call.fmt != "table":
        call.emit(got)
        return
    for key, value in got.items():
        shown = (
            json.dumps(value)
            if isinstance(value, dict | list)
            else ("-" if value is None else value)
        )
        click.echo(f"{key + ':':<26}{shown}")


def _param(option: CliOption) -> str:
    """The name click gives an option's value: ``--kafka-topic`` is ``kafka_topic``."""
    return option.flag.lstrip("-").replace("-", "_")


def _target_options(command: F) -> F:
    """One option per target kind that has one (``--url``, ``--kafka-topic``)."""
    for _, option in reversed(KINDS.cli_options()):
        command = click.option(option.flag, help=option.help)(command)
    return command


@api_command(crons, "create")
@click.option(
    "-f",
    "--file",
    "path",
    type=click.Path(exists=True, dir_okay=False),
    help="One cron definition (YAML or JSON), as POST /cron-jobs takes it.",
)
@click.option("--name")
@click.option("--schedule", help="'0 2 * * *', '@daily', 'every 15m' …")
@click.option("--time-zone", "time_zone", help="IANA zone, required: e.g. Europe/Istanbul.")
@_target_options
@click.option("--payload", help="JSON payload.")
@click.option("--type", "type_")
@click.option("--misfire-policy", type=click.Choice(["RUN_ALL", "RUN_ONCE", "SKIP"]))
@click.option("--concurrency", type=click.Choice(["ALLOW", "FORBID", "REPLACE"]))
@click.option("--month-end-policy", type=click.Choice(["SKIP", "CLAMP"]))
@click.option("--dst-policy", type=click.Choice(["CRONIE", "SKIP", "BOTH"]))
@click.option("--start-at", help="RFC 3339: no slot before it.")
@click.option("--end-at", help="RFC 3339: no slot after it.")
@click.option("--max-runs", type=click.IntRange(1))
@click.option("--jitter-seconds", type=click.IntRange(0))
@click.option("--disabled", is_flag=True, help="Create it disabled.")
def crons_create(call: Call, path: str | None, **flags: Any) -> None:
    """Define a cron job from a file or from options (the same name with the
    same definition is a repeat, 200; with another one a 409: use apply)."""
    if path is not None:
        with open(path, encoding="utf-8") as fh:
            body = yaml.safe_load(fh)
        if not isinstance(body, dict):
            raise click.UsageError(f"{path}: expected one cron definition (a mapping)")
    else:
        body = _body_from_flags(flags)
    created = call.api.request("POST", "/api/v1/cron-jobs", body=body)
    call.emit(created, CRON_COLUMNS)


def _target_from_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """The one target the options name: each kind's option gives its field."""
    options = KINDS.cli_options()
    given = [(kind, option) for kind, option in options if flags[_param(option)]]
    if len(given) != 1:
        raise click.UsageError("give one target: " + " or ".join(o.flag for _, o in options))
    kind, option = given[0]
    return {"kind": kind, option.field: flags[_param(option)]}


def _body_from_flags(flags: dict[str, Any]) -> dict[str, Any]:
    missing = [
        f"--{k.replace('_', '-')}" for k in ("name", "schedule", "time_zone") if not flags[k]
    ]
    if missing:
        raise click.UsageError(f"missing {', '.join(missing)} (or give the definition with -f)")
    target = _target_from_flags(flags)
    body: dict[str, Any] = {
        "name": flags["name"], "schedule": flags["schedule"], "timeZone": flags["time_zone"],
        "target": target,
    }  # fmt: skip
    if flags["payload"] is not None:
        try:
            body["payload"] = json.loads(flags["payload"])
        except ValueError as exc:
            raise click.UsageError(f"--payload is not JSON: {exc}") from None
    names = {
        "type_": "type", "misfire_policy": "misfirePolicy", "concurrency": "concurrency",
        "month_end_policy": "monthEndPolicy", "dst_policy": "dstPolicy", "start_at": "startAt",
        "end_at": "endAt", "max_runs": "maxRuns", "jitter_seconds": "jitterSeconds",
    }  # fmt: skip
    body.update({api: flags[k] for k, api in names.items() if flags[k] is not None})
    if flags["disabled"]:
        body["enabled"] = False
    return body


@api_command(crons, "pause")
@click.argument("cron")
@click.option("--reason", required=True, help="Why; shown in get and list.")
def crons_pause(call: Call, cron: str, reason: str) -> None:
    """Run no slot until resumed; slots that pass meanwhile follow the
    misfire policy on resume."""
    out = call.api.request(
        "POST",
        f"/api/v1/cron-jobs/{quote_segment(find_cron_id(call, cron))}/pause",
        body={"reason": reason},
    )
    call.emit(out, ("cronJobId", "name", "paused", "pauseReason"))


@api_command(crons, "resume")
@click.argument("cron")
def crons_resume(call: Call, cron: str) -> None:
    """Run slots again."""
    out = call.api.request(
        "POST", f"/api/v1/cron-jobs/{quote_segment(find_cron_id(call, cron))}/resume"
    )
    call.emit(out, ("cronJobId", "name", "paused", "nextFireAt"))


@api_command(crons, "backfill")
@click.argument("cron")
@click.option("--from", "from_", required=True, metavar="TIME", help="RFC 3339, included.")
@click.option("--to", required=True, metavar="TIME", help="RFC 3339, excluded; not in the future.")
@click.option(
    "--overlap",
    type=click.Choice(["ALLOW", "SKIP"]),
    default=None,
    help="SKIP: refuse while an occurrence is pending or running.",
)
@click.option("--rerun", is_flag=True, help="Run slots that already ran again.")
@click.option("--dry-run", is_flag=True, help="Say what would happen; write nothing.")
def crons_backfill(
    call: Call, cron: str, from_: str, to: str, overlap: str | None, rerun: bool, dry_run: bool
) -> None:
    """Run the slots of a past range, each once: a slot that already ran is
    reported, not doubled (unless --rerun). Long ranges are written in calls
    of 1,000 slots, one after another."""
    path = f"/api/v1/cron-jobs/{quote_segment(find_cron_id(call, cron))}/backfill"
    body: dict[str, Any] = {"from": from_, "to": to, "rerun": rerun, "dryRun": dry_run}
    if overlap is not None:
        body["overlap"] = overlap
    slots: list[dict[str, Any]] = []
    totals = {"created": 0, "existing": 0, "rerun": 0}
    while True:
        out = call.api.request("POST", path, body=body)
        slots += out["slots"]
        for key in totals:
            totals[key] += out[key]
        # A dry run writes nothing, so its next call would see the same slots.
        if dry_run or not out.get("nextFrom"):
            break
        body["from"] = out["nextFrom"]
    result = {"dryRun": dry_run, "slots": slots, **totals, "nextFrom": out.get("nextFrom")}
    call.emit(result, ("scheduledFor", "jobId", "outcome", "status"), slots)
    if call.fmt == "table":
        verb = "would be " if dry_run else ""
        click.echo(
            f"{totals['created']} {verb}created, {totals['existing']} existing (not doubled), "
            f"{totals['rerun']} {verb}rerun"
            + (f"; more from {out['nextFrom']}" if out.get("nextFrom") else "")
        )


@api_command(crons, "delete")
@click.argument("cron")
def crons_delete(call: Call, cron: str) -> None:
    """Delete a cron job; its occurrences not yet started are cancelled."""
    cron_id = find_cron_id(call, cron)
    call.api.request("DELETE", f"/api/v1/cron-jobs/{quote_segment(cron_id)}")
    call.emit({"cronJobId": cron_id, "deleted": True}, ("cronJobId", "deleted"))


@api_command(crons, "trigger")
@click.argument("cron")
def crons_trigger(call: Call, cron: str) -> None:
    """One extra occurrence now."""
    out = call.api.request(
        "POST", f"/api/v1/cron-jobs/{quote_segment(find_cron_id(call, cron))}/trigger"
    )
    call.emit(out, ("jobId", "scheduledFor"))


@api_command(crons, "preview")
@click.argument("cron")
@click.option("--from", "from_", help="RFC 3339; default now.")
@click.option("--count", type=click.IntRange(1, 1000), default=10, show_default=True)
def crons_preview(call: Call, cron: str, from_: str | None, count: int) -> None:
    """The next fires in the cron's zone, with DST and month-end notes."""
    params = {"from": from_, "count": count}
    out = call.api.request(
        "GET", f"/api/v1/cron-jobs/{quote_segment(find_cron_id(call, cron))}/preview", params=params
    )
    call.emit(out, ("scheduledFor", "local", "runAt", "note"), out["fires"])
    if call.fmt == "table":
        click.echo(
            f"(dstPolicy {out.get('dstPolicy')}, monthEndPolicy {out.get('monthEndPolicy')})"
        )
        if out.get("calendar"):
            click.echo(f"(calendar {out['calendar']}, version {out.get('calendarVersion')})")
        if out.get("end"):
            click.echo(f"(ends: {out['end']})")


@api_command(crons, "runs")
@click.argument("cron")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
def crons_runs(call: Call, cron: str, limit: int) -> None:
    """Recent occurrences, newest first."""
    out = call.api.request(
        "GET",
        f"/api/v1/cron-jobs/{quote_segment(find_cron_id(call, cron))}/runs",
        params={"limit": limit},
    )
    call.emit(
        out,
        ("jobId", "scheduledFor", "status", "attempt", "latenessSeconds", "lastError"),
        out["runs"],
    )
