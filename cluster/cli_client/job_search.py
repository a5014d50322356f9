"""The job search ``vakit jobs list`` and ``vakit dlq`` share: its filters as
options, their API fields, and following the pages of ``GET /jobs``
(a shard that could not be read makes the answer incomplete: exit 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from cluster.cli_client.api_command import Call
from cluster.cli_client.crons import find_cron_id

__all__ = ["JOB_COLUMNS", "filter_fields", "search_filters", "search_jobs", "statuses"]

JOB_COLUMNS = ("jobId", "status", "type", "runAt", "attempt", "maxAttempts", "lastError")


def search_filters(f: Callable[..., Any]) -> Callable[..., Any]:
    """The job search's filters, as options (GET /jobs, POST /jobs:retry|cancel)."""
    options = [
        click.option("--type", "type_", help="Only jobs of this type."),
        click.option(
            "--cron", "cron", metavar="CRON", help="Only this cron job's occurrences (id or name)."
        ),
        click.option("--run-at-from", metavar="TIME", help="RFC 3339: runAt at or after it."),
        click.option("--run-at-to", metavar="TIME", help="RFC 3339: runAt before it."),
        click.option("--finished-from", metavar="TIME", help="RFC 3339: finished at or after it."),
        click.option("--finished-to", metavar="TIME", help="RFC 3339: finished before it."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def filter_fields(call: Call, flags: dict[str, Any]) -> dict[str, Any]:
    cron = flags.pop("cron", None)
    fields = {
        "type": flags.pop("type_", None),
        "cronJobId": find_cron_id(call, cron) if cron else None,
        "runAtFrom": flags.pop("run_at_from", None),
        "runAtTo": flags.pop("run_at_to", None),
        "finishedFrom": flags.pop("finished_from", None),
        "finishedTo": flags.pop("finished_to", None),
    }
    return {k: v for k, v in fields.items() if v is not None}


def statuses(values: tuple[str, ...]) -> list[str]:
    return [s.strip().upper() for v in values for s in v.split(",") if s.strip()]


def search_jobs(call: Call, params: dict[str, Any], every: bool, columns: tuple[str, ...]) -> None:
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
    call.emit(
        {"items": items, "nextCursor": cursor, "missingShards": sorted(missing)}, columns, items
    )
    if call.fmt == "table" and cursor:
        click.echo(f"(more: --cursor {cursor}, or --all)")
    if missing:
        raise click.ClickException(
            f"incomplete: shard(s) {', '.join(map(str, sorted(missing)))} could not be read"
        )
