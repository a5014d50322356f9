"""``vakit jobs``: find, inspect, cancel and retry jobs."""

from __future__ import annotations

from typing import Any

import click

from cluster.cli_client.api_command import Call, api_command, quote_segment
from cluster.cli_client.job_search import (
    JOB_COLUMNS,
    filter_fields,
    search_filters,
    search_jobs,
    statuses,
)
from cluster.cli_client.output import table

__all__ = ["jobs"]


@click.group()
def jobs() -> None:
    """Find, inspect, cancel and retry jobs."""


@api_command(jobs, "get")
@click.argument("job_id")
def jobs_get(call: Call, job_id: str) -> None:
    """A job with its attempts."""
    job = call.api.request("GET", f"/api/v1/jobs/{quote_segment(job_id)}")
    if call.fmt != "table":
        call.emit(job)
        return
    for key in (
        "jobId",
        "status",
        "type",
        "runAt",
        "scheduledFor",
        "attempt",
        "maxAttempts",
        "shard",
        "lastError",
    ):
        if key in job:
            click.echo(f"{key + ':':<14}{job[key] if job[key] is not None else '-'}")
    attempts = job.get("attempts") or []
    if attempts:
        click.echo("")
        click.echo(
            table(attempts, ("attempt", "worker", "startedAt", "finishedAt", "outcome", "error"))
        )


@api_command(jobs, "list")
@click.option(
    "--status",
    multiple=True,
    help="SCHEDULED, RUNNING, SUCCEEDED, FAILED, CANCELLED, SKIPPED; repeat or comma separate.",
)
@search_filters
@click.option(
    "--limit", type=click.IntRange(1, 500), default=50, show_default=True, help="Jobs per page."
)
@click.option("--cursor", help="A page's nextCursor.")
@click.option("--all", "every", is_flag=True, help="Follow nextCursor to the last page.")
@click.option("--attempts", is_flag=True, help="Include each job's attempt log (json/yaml).")
# Not among search_filters: the bulk retry and cancel take no labels.
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only jobs with this label (exact match); repeat: every one.",
)
def jobs_list(
    call: Call,
    status: tuple[str, ...],
    limit: int,
    cursor: str | None,
    every: bool,
    attempts: bool,
    labels: tuple[str, ...],
    **flags: Any,
) -> None:
    """Search the owner's jobs on every shard, newest first."""
    params = {**filter_fields(call, flags), "status": statuses(status), "limit": limit,
              "cursor": cursor, "attempts": attempts or None, "label": list(labels)}  # fmt: skip
    search_jobs(call, params, every, JOB_COLUMNS)


@api_command(jobs, "retry")
@click.argument("job_id")
def jobs_retry(call: Call, job_id: str) -> None:
    """Run a FAILED or CANCELLED job again: same jobId and scheduledFor, a
    new series of attempts (any other status: exit 1, 409)."""
    job = call.api.request("POST", f"/api/v1/jobs/{quote_segment(job_id)}/retry")
    call.emit(job, JOB_COLUMNS)


@api_command(jobs, "cancel")
@click.argument("job_id")
def jobs_cancel(call: Call, job_id: str) -> None:
    """Cancel a job that has not started (a started one: exit 1, 409)."""
    call.api.request("DELETE", f"/api/v1/jobs/{quote_segment(job_id)}")
    call.emit({"jobId": job_id, "status": "CANCELLED"}, ("jobId", "status"))
