"""``vakit dlq``: dead letters (FAILED jobs), why they failed, and running
them again one by one or all that match the filters.
"""

from __future__ import annotations

from typing import Any

import click

from cluster.cli_client.api_command import Call, api_command, quote_segment
from cluster.cli_client.job_search import JOB_COLUMNS, filter_fields, search_filters, search_jobs

__all__ = ["dlq"]

DEAD_COLUMNS = ("jobId", "type", "scheduledFor", "finishedAt", "attempt", "lastError")


@click.group()
def dlq() -> None:
    """Dead letters: FAILED jobs, why they failed, and running them again."""


@api_command(dlq, "list")
@search_filters
@click.option(
    "--limit", type=click.IntRange(1, 500), default=50, show_default=True, help="Jobs per page."
)
@click.option("--cursor", help="A page's nextCursor.")
@click.option("--all", "every", is_flag=True, help="Follow nextCursor to the last page.")
@click.option("--attempts", is_flag=True, help="Include each job's attempt log (json/yaml).")
def dlq_list(
    call: Call, limit: int, cursor: str | None, every: bool, attempts: bool, **flags: Any
) -> None:
    """The FAILED jobs, newest first, with their last error."""
    params = {**filter_fields(call, flags), "status": ["FAILED"], "limit": limit,
              "cursor": cursor, "attempts": attempts or None}  # fmt: skip
    search_jobs(call, params, every, DEAD_COLUMNS)


@api_command(dlq, "retry")
@click.argument("job_ids", nargs=-1)
@click.option(
    "--all", "every", is_flag=True, help="Every FAILED job the filters match, in calls of --limit."
)
@search_filters
@click.option("--include-cancelled", is_flag=True, help="With --all: CANCELLED jobs too.")
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="Jobs per call."
)
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
        done = [call.api.request("POST", f"/api/v1/jobs/{quote_segment(j)}/retry") for j in job_ids]
        call.emit(done, JOB_COLUMNS)
        return
    body: dict[str, Any] = {**filter_fields(call, flags), "limit": limit, "dryRun": dry_run}
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
    result = {
        "dryRun": dry_run,
        "jobIds": acted,
        "failed": failed,
        "missingShards": sorted(missing),
    }
    call.emit(result, ("jobId",), [{"jobId": j} for j in acted])
    if call.fmt == "table":
        click.echo(
            f"{len(acted)} job(s) {'would be ' if dry_run else ''}retried, {len(failed)} refused"
        )
    if failed or missing:
        raise click.ClickException(
            f"{len(failed)} refused"
            + (f"; shard(s) {sorted(missing)} could not be read" if missing else "")
        )
