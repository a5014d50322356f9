"""``vakit jobs``, ``vakit crons``, ``vakit dlq`` and ``vakit completion``:
the command line for people, on the HTTP API only (never the database).

Every command takes ``--api-url`` and ``--token`` (or ``VAKIT_API_URL`` and
``VAKIT_TOKEN``) and ``-o table|json|yaml``. Exit codes are for scripts:
0 done, 1 failed (the API refused, or could not be reached), 2 usage (a
missing or bad option), 3 not found.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click
import yaml

from cluster.cli_client.http import ApiClient, ApiError, Unreachable
from cluster.cli_client.output import FORMATS, emit, table
from cluster.targets.kinds import KINDS
from cluster.targets.registry import CliOption

if TYPE_CHECKING:
    from cluster.cli_client.cronfile import Change, CronFile, LintResult

__all__ = ["EXIT_FAILED", "EXIT_NOT_FOUND", "EXIT_OK", "EXIT_USAGE", "register"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND = 0, 1, 2, 3

F = TypeVar("F", bound=Callable[..., Any])

JOB_COLUMNS = ("jobId", "status", "type", "runAt", "attempt", "maxAttempts", "lastError")
CRON_COLUMNS = (
    "cronJobId", "name", "schedule", "timeZone", "enabled", "paused", "nextFireAt", "runCount",
    "missedCount",
)  # fmt: skip
DEAD_COLUMNS = ("jobId", "type", "scheduledFor", "finishedAt", "attempt", "lastError")


class NotFoundError(click.ClickException):
    exit_code = EXIT_NOT_FOUND


@dataclass(frozen=True)
class Call:
    """What every API command gets: the client and the output format."""

    api: ApiClient
    fmt: str

    def emit(self, data: Any, columns: tuple[str, ...] = (), rows: Any = None) -> None:
        emit(data, self.fmt, columns, rows)


def api_command(group: click.Group, name: str, **kwargs: Any) -> Callable[[F], F]:
    """A command of ``group`` that talks to the API: adds the connection and
    output options, passes a :class:`Call` first, and turns the API's
    errors into exit codes."""

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def run(
            api_url: str | None, token: str | None, owner: str | None, output: str, **params: Any
        ) -> Any:
            if not api_url:
                raise click.UsageError("no API to talk to: pass --api-url or set VAKIT_API_URL")
            call = Call(ApiClient(api_url, token, acting_for=owner), output)
            try:
                return f(call, **params)
            except ApiError as exc:
                if exc.status == 404:
                    raise NotFoundError(str(exc)) from None
                raise click.ClickException(str(exc)) from None
            except Unreachable as exc:
                raise click.ClickException(str(exc)) from None

        options = [
            click.option(
                "--api-url", envvar="VAKIT_API_URL", metavar="URL",
                help="The Vakit API, e.g. http://127.0.0.1:8080 (env VAKIT_API_URL).",
            ),
            click.option(
                "--token", envvar="VAKIT_TOKEN", metavar="TOKEN",
                help="Bearer token (env VAKIT_TOKEN).",
            ),
            click.option(
                "--owner", envvar="VAKIT_OWNER", metavar="SERVICE",
                help="With an operator token: act for this owner service (env VAKIT_OWNER).",
            ),
            click.option(
                "-o", "--output", type=click.Choice(FORMATS), default="table", show_default=True,
                help="table for people; json or yaml for scripts.",
            ),
        ]  # fmt: skip
        command: Any = run
        for option in reversed(options):
            command = option(command)
        group.command(name, **kwargs)(command)
        return f

    return decorate


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


def _pages(call: Call, path: str, params: dict[str, Any], items: str, cursor: str, next_key: str = "nextCursor") -> Iterator[dict[str, Any]]:
    """Every item of a paginated list, following ``nextCursor``."""
    page_params = dict(params)
    while True:
        page = call.api.request("GET", path, params=page_params)
        yield from page.get(items, [])
        nxt = page.get(next_key)
        if not nxt:
            return
        page_params[cursor] = nxt


# -- jobs ------------------------------------------------------------------------


@click.group()
def jobs() -> None:
    """Find, inspect, cancel and retry jobs."""


@api_command(jobs, "get")
@click.argument("job_id")
def jobs_get(call: Call, job_id: str) -> None:
    """A job with its attempts."""
    job = call.api.request("GET", f"/api/v1/jobs/{_quote(job_id)}")
    if call.fmt != "table":
        call.emit(job)
        return
    for key in ("jobId", "status", "type", "runAt", "scheduledFor", "attempt", "maxAttempts", "shard", "lastError"):
        if key in job:
            click.echo(f"{key + ':':<14}{job[key] if job[key] is not None else '-'}")
    attempts = job.get("attempts") or []
    if attempts:
        click.echo("")
        click.echo(table(attempts, ("attempt", "worker", "startedAt", "finishedAt", "outcome", "error")))


def _filters(f: Callable[..., Any]) -> Callable[..., Any]:
    """The job search's filters, as options (GET /jobs, POST /jobs:retry|cancel)."""
    options = [
        click.option("--type", "type_", help="Only jobs of this type."),
        click.option("--cron", "cron", metavar="CRON", help="Only this cron job's occurrences (id or name)."),
        click.option("--run-at-from", metavar="TIME", help="RFC 3339: runAt at or after it."),
        click.option("--run-at-to", metavar="TIME", help="RFC 3339: runAt before it."),
        click.option("--finished-from", metavar="TIME", help="RFC 3339: finished at or after it."),
        click.option("--finished-to", metavar="TIME", help="RFC 3339: finished before it."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _filter_fields(call: Call, flags: dict[str, Any]) -> dict[str, Any]:
    cron = flags.pop("cron", None)
    fields = {
        "type": flags.pop("type_", None),
        "cronJobId": _cron_id(call, cron) if cron else None,
        "runAtFrom": flags.pop("run_at_from", None),
        "runAtTo": flags.pop("run_at_to", None),
        "finishedFrom": flags.pop("finished_from", None),
        "finishedTo": flags.pop("finished_to", None),
    }
    return {k: v for k, v in fields.items() if v is not None}


def _statuses(values: tuple[str, ...]) -> list[str]:
    return [s.strip().upper() for v in values for s in v.split(",") if s.strip()]


def _search(
    call: Call, params: dict[str, Any], every: bool, columns: tuple[str, ...]
) -> None:
    """GET /jobs, one page or (``every``) all of them; a shard that could not
    be read makes the answer incomplete: said on stderr, and exit 1."""
    items: list[dict[str, Any]] = []
    missing: set[int] = set()
    cursor = params.pop("cursor", None)
    while True:
        page = call.api.request("GET", "/api/v1/jobs", params={**params, "cursor": cursor})
        items += page["items"]
        missing.update(page.get("missingShards") or [])
        cursor = page.get("nextCursor")
        if not every or not cursor:
            break
    call.emit({"items": items, "nextCursor": cursor, "missingShards": sorted(missing)}, columns, items)
    if call.fmt == "table" and cursor:
        click.echo(f"(more: --cursor {cursor}, or --all)")
    if missing:
        raise click.ClickException(
            f"incomplete: shard(s) {', '.join(map(str, sorted(missing)))} could not be read"
        )


@api_command(jobs, "list")
@click.option("--status", multiple=True, help="SCHEDULED, RUNNING, SUCCEEDED, FAILED, CANCELLED, SKIPPED; repeat or comma separate.")
@_filters
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True, help="Jobs per page.")
@click.option("--cursor", help="A page's nextCursor.")
@click.option("--all", "every", is_flag=True, help="Follow nextCursor to the last page.")
@click.option("--attempts", is_flag=True, help="Include each job's attempt log (json/yaml).")
def jobs_list(call: Call, status: tuple[str, ...], limit: int, cursor: str | None, every: bool, attempts: bool, **flags: Any) -> None:
    """Search the owner's jobs on every shard, newest first."""
    params = {**_filter_fields(call, flags), "status": _statuses(status), "limit": limit,
              "cursor": cursor, "attempts": attempts or None}  # fmt: skip
    _search(call, params, every, JOB_COLUMNS)


@api_command(jobs, "retry")
@click.argument("job_id")
def jobs_retry(call: Call, job_id: str) -> None:
    """Run a FAILED or CANCELLED job again: same jobId and scheduledFor, a
    new series of attempts (any other status: exit 1, 409)."""
    job = call.api.request("POST", f"/api/v1/jobs/{_quote(job_id)}/retry")
    call.emit(job, JOB_COLUMNS)


@api_command(jobs, "cancel")
@click.argument("job_id")
def jobs_cancel(call: Call, job_id: str) -> None:
    """Cancel a job that has not started (a started one: exit 1, 409)."""
    call.api.request("DELETE", f"/api/v1/jobs/{_quote(job_id)}")
    call.emit({"jobId": job_id, "status": "CANCELLED"}, ("jobId", "status"))


# -- crons -----------------------------------------------------------------------


@click.group()
def crons() -> None:
    """Define, inspect and run cron jobs; keep them as code (apply, lint)."""


def _all_crons(call: Call) -> list[dict[str, Any]]:
    return list(_pages(call, "/api/v1/cron-jobs", {"limit": 500}, "items", "after"))


def _cron_id(call: Call, ref: str) -> str:
    """A cron by id (``cron_…``) or by name."""
    if ref.startswith("cron_"):
        return ref
    for cron in _all_crons(call):
        if cron["name"] == ref:
            return str(cron["cronJobId"])
    raise NotFoundError(f"no cron job named {ref!r}")


@api_command(crons, "list")
@click.option("--limit", type=click.IntRange(1, 500), default=None, help="One page of this many (default: all).")
@click.option("--after", default=None, help="The name to start after (a page's nextCursor).")
def crons_list(call: Call, limit: int | None, after: str | None) -> None:
    """The owner's cron jobs by name."""
    if limit is None:
        items = list(_pages(call, "/api/v1/cron-jobs", {"limit": 500, "after": after}, "items", "after"))
        call.emit({"items": items, "nextCursor": None}, CRON_COLUMNS, items)
        return
    page = call.api.request("GET", "/api/v1/cron-jobs", params={"limit": limit, "after": after})
    call.emit(page, CRON_COLUMNS, page["items"])


@api_command(crons, "get")
@click.argument("cron")
def crons_get(call: Call, cron: str) -> None:
    """A cron job, by id or name."""
    got = call.api.request("GET", f"/api/v1/cron-jobs/{_quote(_cron_id(call, cron))}")
    if call.fmt != "table":
        call.emit(got)
        return
    for key, value in got.items():
        shown = json.dumps(value) if isinstance(value, dict | list) else ("-" if value is None else value)
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
@click.option("-f", "--file", "path", type=click.Path(exists=True, dir_okay=False), help="One cron definition (YAML or JSON), as POST /cron-jobs takes it.")
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
    missing = [f"--{k.replace('_', '-')}" for k in ("name", "schedule", "time_zone") if not flags[k]]
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
        "POST", f"/api/v1/cron-jobs/{_quote(_cron_id(call, cron))}/pause", body={"reason": reason}
    )
    call.emit(out, ("cronJobId", "name", "paused", "pauseReason"))


@api_command(crons, "resume")
@click.argument("cron")
def crons_resume(call: Call, cron: str) -> None:
    """Run slots again."""
    out = call.api.request("POST", f"/api/v1/cron-jobs/{_quote(_cron_id(call, cron))}/resume")
    call.emit(out, ("cronJobId", "name", "paused", "nextFireAt"))


@api_command(crons, "backfill")
@click.argument("cron")
@click.option("--from", "from_", required=True, metavar="TIME", help="RFC 3339, included.")
@click.option("--to", required=True, metavar="TIME", help="RFC 3339, excluded; not in the future.")
@click.option("--overlap", type=click.Choice(["ALLOW", "SKIP"]), default=None, help="SKIP: refuse while an occurrence is pending or running.")
@click.option("--rerun", is_flag=True, help="Run slots that already ran again.")
@click.option("--dry-run", is_flag=True, help="Say what would happen; write nothing.")
def crons_backfill(call: Call, cron: str, from_: str, to: str, overlap: str | None, rerun: bool, dry_run: bool) -> None:
    """Run the slots of a past range, each once: a slot that already ran is
    reported, not doubled (unless --rerun). Long ranges are written in calls
    of 1,000 slots, one after another."""
    path = f"/api/v1/cron-jobs/{_quote(_cron_id(call, cron))}/backfill"
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
            f"{totals['rerun']} {verb}rerun" + (f"; more from {out['nextFrom']}" if out.get("nextFrom") else "")
        )


@api_command(crons, "delete")
@click.argument("cron")
def crons_delete(call: Call, cron: str) -> None:
    """Delete a cron job; its occurrences not yet started are cancelled."""
    cron_id = _cron_id(call, cron)
    call.api.request("DELETE", f"/api/v1/cron-jobs/{_quote(cron_id)}")
    call.emit({"cronJobId": cron_id, "deleted": True}, ("cronJobId", "deleted"))


@api_command(crons, "trigger")
@click.argument("cron")
def crons_trigger(call: Call, cron: str) -> None:
    """One extra occurrence now."""
    out = call.api.request("POST", f"/api/v1/cron-jobs/{_quote(_cron_id(call, cron))}/trigger")
    call.emit(out, ("jobId", "scheduledFor"))


@api_command(crons, "preview")
@click.argument("cron")
@click.option("--from", "from_", help="RFC 3339; default now.")
@click.option("--count", type=click.IntRange(1, 1000), default=10, show_default=True)
def crons_preview(call: Call, cron: str, from_: str | None, count: int) -> None:
    """The next fires in the cron's zone, with DST and month-end notes."""
    params = {"from": from_, "count": count}
    out = call.api.request("GET", f"/api/v1/cron-jobs/{_quote(_cron_id(call, cron))}/preview", params=params)
    call.emit(out, ("scheduledFor", "local", "note"), out["fires"])
    if call.fmt == "table":
        click.echo(f"(dstPolicy {out.get('dstPolicy')}, monthEndPolicy {out.get('monthEndPolicy')})")
        if out.get("end"):
            click.echo(f"(ends: {out['end']})")


@api_command(crons, "runs")
@click.argument("cron")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
def crons_runs(call: Call, cron: str, limit: int) -> None:
    """Recent occurrences, newest first."""
    out = call.api.request(
        "GET", f"/api/v1/cron-jobs/{_quote(_cron_id(call, cron))}/runs", params={"limit": limit}
    )
    call.emit(
        out, ("jobId", "scheduledFor", "status", "attempt", "latenessSeconds", "lastError"), out["runs"]
    )


@api_command(crons, "apply")
@click.option("-f", "--file", "path", required=True, type=click.Path(exists=True, dir_okay=False), help="The crons file (see `vakit crons lint`).")
@click.option("--prune", is_flag=True, help="Also delete the crons the file owns (its 'owns' prefix) but no longer lists.")
@click.option("--dry-run", is_flag=True, help="Print the changes, make none.")
def crons_apply(call: Call, path: str, prune: bool, dry_run: bool) -> None:
    """Make the server match a crons file: create, update (PATCH) and, with
    --prune, delete. The changes are printed first."""
    from cluster.cli_client.cronfile import lint, plan_changes

    cron_file = _load_or_usage(path)
    if prune and cron_file.owns is None:
        raise click.UsageError(f"{path}: --prune needs 'owns: <name prefix>' in the file")
    results = lint(cron_file, datetime.now(UTC), count=1, scan_days=0)
    bad = [r for r in results if r.errors]
    if bad:
        _print_lint_errors(bad)
        raise click.ClickException(f"{path}: {len(bad)} cron(s) invalid; nothing applied")
    specs = [r.spec for r in results if r.spec is not None]
    changes, extra = plan_changes(specs, _all_crons(call), cron_file.owns, prune)
    _print_changes(changes, extra, prune, call.fmt)
    if dry_run:
        return
    done = 0
    for change in changes:
        if change.action == "create":
            call.api.request("POST", "/api/v1/cron-jobs", body=change.body)
        elif change.action == "update":
            call.api.request("PATCH", f"/api/v1/cron-jobs/{_quote(change.cron_job_id or '')}", body=change.body)
        elif change.action == "delete":
            call.api.request("DELETE", f"/api/v1/cron-jobs/{_quote(change.cron_job_id or '')}")
        else:
            continue
        done += 1
    if call.fmt == "table":
        click.echo(f"applied {done} change(s)")


def _print_changes(changes: list[Change], extra: list[str], prune: bool, fmt: str) -> None:
    counts = {a: sum(1 for c in changes if c.action == a) for a in ("create", "update", "delete", "unchanged")}
    if fmt != "table":
        data = {
            "changes": [
                {"action": c.action, "name": c.name, "cronJobId": c.cron_job_id,
                 "diff": [{"field": k, "server": h, "file": w} for k, h, w in c.diff]}
                for c in changes
            ],
            "notInFile": [] if prune else extra,
            "summary": counts,
        }  # fmt: skip
        emit(data, fmt)
        return
    marks = {"create": "+", "update": "~", "delete": "-", "unchanged": "="}
    for c in changes:
        click.echo(f"{marks[c.action]} {c.action:<9} {c.name}")
        for key, have, want in c.diff:
            click.echo(f"      {key}: {json.dumps(have)} -> {json.dumps(want)}")
    if not prune:
        for name in extra:
            click.echo(f"! not in file {name} (kept; --prune deletes it)")
    click.echo(
        f"plan: {counts['create']} to create, {counts['update']} to update, "
        f"{counts['delete']} to delete, {counts['unchanged']} unchanged"
    )


def _load_or_usage(path: str) -> CronFile:
    # The file's validation uses the API's models (pydantic): loaded only
    # by the commands that read a crons file.
    from cluster.cli_client.cronfile import FileError, load

    try:
        return load(path)
    except FileError as exc:
        raise click.UsageError(str(exc)) from None


def _print_lint_errors(bad: list[LintResult]) -> None:
    for r in bad:
        for error in r.errors:
            click.echo(f"{r.name}: {error}", err=True)


@crons.command("lint")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--count", type=click.IntRange(1, 100), default=5, show_default=True, help="Fires to show per cron.")
@click.option("-o", "--output", type=click.Choice(FORMATS), default="table", show_default=True)
def crons_lint(path: str, count: int, output: str) -> None:
    """Check a crons file offline, as the server would, and show each cron's
    next fires in its zone with the DST and month-end notes of the year
    ahead. Exit 1 when a cron is invalid: run it in CI."""
    from cluster.cli_client.cronfile import lint

    cron_file = _load_or_usage(path)
    results = lint(cron_file, datetime.now(UTC), count=count)
    if output != "table":
        emit(
            [
                {
                    "name": r.name,
                    "ok": not r.errors,
                    "errors": r.errors,
                    "notes": r.notes,
                    "fires": [_fire(f) for f in r.fires],
                    "notesAhead": [_fire(f) for f in r.notes_ahead],
                }
                for r in results
            ],
            output,
        )
    else:
        for r in results:
            if r.errors:
                click.echo(f"✗ {r.name}")
                for error in r.errors:
                    click.echo(f"    {error}")
                continue
            assert r.spec is not None
            spec = r.spec
            click.echo(
                f"✓ {r.name}  '{spec.schedule}' in {spec.timeZone} "
                f"(dstPolicy {spec.dstPolicy}, monthEndPolicy {spec.monthEndPolicy})"
            )
            for fire in r.fires:
                click.echo(f"    {fire.local:%Y-%m-%d %H:%M %Z}  ({fire.scheduled_for:%Y-%m-%dT%H:%M:%SZ})" + (f"  {fire.note}" if fire.note else ""))
            shown = {f.scheduled_for for f in r.fires}
            for fire in r.notes_ahead:
                if fire.scheduled_for not in shown:
                    click.echo(f"    note {fire.local:%Y-%m-%d %H:%M %Z}: {fire.note}")
            for note in r.notes:
                click.echo(f"    ({note})")
    bad = [r for r in results if r.errors]
    if bad:
        raise click.ClickException(f"{path}: {len(bad)} of {len(results)} cron(s) invalid")


def _fire(fire: Any) -> dict[str, Any]:
    return {
        "scheduledFor": fire.scheduled_for.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "local": fire.local.isoformat(),
        "note": fire.note,
    }


# -- dead letters ------------------------------------------------------------------


@click.group()
def dlq() -> None:
    """Dead letters: FAILED jobs, why they failed, and running them again."""


@api_command(dlq, "list")
@_filters
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True, help="Jobs per page.")
@click.option("--cursor", help="A page's nextCursor.")
@click.option("--all", "every", is_flag=True, help="Follow nextCursor to the last page.")
@click.option("--attempts", is_flag=True, help="Include each job's attempt log (json/yaml).")
def dlq_list(call: Call, limit: int, cursor: str | None, every: bool, attempts: bool, **flags: Any) -> None:
    """The FAILED jobs, newest first, with their last error."""
    params = {**_filter_fields(call, flags), "status": ["FAILED"], "limit": limit,
              "cursor": cursor, "attempts": attempts or None}  # fmt: skip
    _search(call, params, every, DEAD_COLUMNS)


@api_command(dlq, "retry")
@click.argument("job_ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every FAILED job the filters match, in calls of --limit.")
@_filters
@click.option("--include-cancelled", is_flag=True, help="With --all: CANCELLED jobs too.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="Jobs per call.")
@click.option("--dry-run", is_flag=True, help="With --all: list the jobs that would run again.")
def dlq_retry(
    call: Call, job_ids: tuple[str, ...], every: bool, include_cancelled: bool, limit: int,
    dry_run: bool, **flags: Any,
) -> None:  # fmt: skip
    """Run dead letters again: the JOB_IDS given, or --all that match the filters."""
    if bool(job_ids) == every:
        raise click.UsageError("give job ids, or --all (with filters)")
    if job_ids:
        if dry_run:
            raise click.UsageError("--dry-run goes with --all")
        done = [call.api.request("POST", f"/api/v1/jobs/{_quote(j)}/retry") for j in job_ids]
        call.emit(done, JOB_COLUMNS)
        return
    body: dict[str, Any] = {**_filter_fields(call, flags), "limit": limit, "dryRun": dry_run}
    body["status"] = ["FAILED", "CANCELLED"] if include_cancelled else ["FAILED"]
    acted: list[str] = []
    failed: list[dict[str, Any]] = []
    missing: set[int] = set()
    for _ in range(10_000):  # bounded: each call examines up to `limit`
        out = call.api.request("POST", "/api/v1/jobs:retry", body=body)
        acted += out["jobIds"]
        failed += out["failed"]
        missing.update(out.get("missingShards") or [])
        # Each call goes on below the jobs the last one examined: a job the
        # API refused (at its attempt cap, say) is reported once, and the
        # ones below it are still reached.
        body["cursor"] = out.get("nextCursor")
        if dry_run or not out["more"] or not body["cursor"]:
            break
    result = {"dryRun": dry_run, "jobIds": acted, "failed": failed, "missingShards": sorted(missing)}
    call.emit(result, ("jobId",), [{"jobId": j} for j in acted])
    if call.fmt == "table":
        click.echo(f"{len(acted)} job(s) {'would be ' if dry_run else ''}retried, {len(failed)} refused")
    if failed or missing:
        raise click.ClickException(
            f"{len(failed)} refused" + (f"; shard(s) {sorted(missing)} could not be read" if missing else "")
        )


# -- completion ------------------------------------------------------------------


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script, e.g.
    `eval "$(vakit completion bash)"` in ~/.bashrc."""
    from click.shell_completion import get_completion_class

    root = ctx.find_root().command
    cls = get_completion_class(shell)
    assert cls is not None
    click.echo(cls(root, {}, "vakit", "_VAKIT_COMPLETE").source())


def register(main: click.Group) -> None:
    """Add the HTTP commands to the ``vakit`` group."""
    for command in (jobs, crons, dlq, completion):
        main.add_command(command)
