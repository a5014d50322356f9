"""``vakit crons apply`` and ``vakit crons lint``: crons kept as code. The
file's format, checks and the plan of changes are
:mod:`cluster.cli_client.cronfile`; these are the commands on the ``crons``
group that print the plan, apply it over the API, or lint offline.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from cluster.cli_client.api_command import Call, api_command, quote_segment
from cluster.cli_client.crons import all_crons, crons
from cluster.cli_client.output import FORMATS, emit

if TYPE_CHECKING:
    from cluster.cli_client.cronfile import Change, CronFile, LintResult

__all__ = ["crons_apply", "crons_lint"]


@api_command(crons, "apply")
@click.option(
    "-f",
    "--file",
    "path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The crons file (see `vakit crons lint`).",
)
@click.option(
    "--prune",
    is_flag=True,
    help="Also delete the crons the file owns (its 'owns' prefix) but no longer lists.",
)
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
    changes, extra = plan_changes(specs, all_crons(call), cron_file.owns, prune)
    _print_changes(changes, extra, prune, call.fmt)
    if dry_run:
        return
    done = 0
    for change in changes:
        if change.action == "create":
            call.api.request("POST", "/api/v1/cron-jobs", body=change.body)
        elif change.action == "update":
            call.api.request(
                "PATCH",
                f"/api/v1/cron-jobs/{quote_segment(change.cron_job_id or '')}",
                body=change.body,
            )
        elif change.action == "delete":
            call.api.request(
                "DELETE", f"/api/v1/cron-jobs/{quote_segment(change.cron_job_id or '')}"
            )
        else:
            continue
        done += 1
    if call.fmt == "table":
        click.echo(f"applied {done} change(s)")


def _print_changes(changes: list[Change], extra: list[str], prune: bool, fmt: str) -> None:
    counts = {
        a: sum(1 for c in changes if c.action == a)
        for a in ("create", "update", "delete", "unchanged")
    }
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
@click.option(
    "--count",
    type=click.IntRange(1, 100),
    default=5,
    show_default=True,
    help="Fires to show per cron.",
)
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
            if spec.calendar is not None:
                # Offline there is no calendar to read: the fires below are
                # the nominal slots, business days Monday to Friday.
                click.echo(
                    f"    (calendar {spec.calendar}, calendarPolicy "
                    f"{spec.calendarPolicy or 'SKIP'}: not read offline; slots shown unmoved, "
                    "business days Monday-Friday)"
                )
            for fire in r.fires:
                click.echo(
                    f"    {fire.local:%Y-%m-%d %H:%M %Z}  ({fire.scheduled_for:%Y-%m-%dT%H:%M:%SZ})"
                    + (f"  {fire.note}" if fire.note else "")
                )
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
