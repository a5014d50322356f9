"""What operators do with jobs: search, retry, bulk retry and cancel, pause
and resume.

A search reads every shard at once and merges the pages newest first, by
job id: ids are UUIDv7, so the order is the jobs' creation order on every
shard, and it never changes while a job moves from the far table to the
hot one and to history. The cursor is the last id of a page: the next page
is every shard's ids below it, which stays exact however jobs move or
finish in between. A shard that cannot be read is named in ``missing``;
the others still answer.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from cluster.errors import InvalidRequest, ShardUnavailable, VakitError
from cluster.model import (
    RETRYABLE,
    CancelParams,
    JobRecord,
    JobSearchParams,
    JobStatus,
    PauseJobParams,
    ResumeJobParams,
    RetryJobParams,
)
from cluster.services.context import Services
from cluster.services.job_document import LABEL_KEY, MAX_LABEL_KEY, MAX_LABEL_VALUE, MAX_LABELS
from cluster.services.jobs import job_id_text, locate
from cluster.services.routing import owner_and

__all__ = [
    "BulkResult",
    "JobPage",
    "bulk_cancel",
    "bulk_retry",
    "cancel_statuses",
    "label_filter",
    "pause_job",
    "resume_job",
    "retry_job",
    "retry_statuses",
    "search_jobs",
]


@dataclass(frozen=True)
class JobPage:
    """A page of a search: each job with its shard, newest first; whether
    more may follow; the shards that could not be read."""

    jobs: list[tuple[JobRecord, int]]
    more: bool
    missing: list[int]

    @property
    def next_cursor(self) -> str | None:
        """The last id of the page, when more may follow."""
        return job_id_text(self.jobs[-1][0].id) if self.more and self.jobs else None


def label_filter(values: Sequence[str] | None) -> dict[str, str] | None:
    """A search's label filters, each ``key=value`` (the value may be empty,
    or hold ``=``): a job matches when it has every pair. The key and the
    value follow the create's rules, so a filter no job could match is a
    422 rather than an empty page; so is a key asked with two values."""
    if not values:
        return None
    wanted: dict[str, str] = {}
    for text in values:
        key, eq, value = text.partition("=")
        if not eq:
            raise InvalidRequest(f"label {text!r} is not key=value", field="label")
        if len(key) > MAX_LABEL_KEY or not re.fullmatch(LABEL_KEY, key):
            raise InvalidRequest(
                f"label key {key!r} is not 1 to {MAX_LABEL_KEY} letters, digits and . _ / - "
                "(starting and ending with a letter or digit)",
                field="label",
            )
        if len(value) > MAX_LABEL_VALUE:
            raise InvalidRequest(
                f"label {key!r}: a value has at most {MAX_LABEL_VALUE} characters", field="label"
            )
        if wanted.setdefault(key, value) != value:
            raise InvalidRequest(f"label {key!r} is asked with two values", field="label")
    if len(wanted) > MAX_LABELS:
        raise InvalidRequest(f"a job has at most {MAX_LABELS} labels", field="label")
    return wanted


async def search_jobs(ctx: Services, params: JobSearchParams) -> JobPage:
    """``params`` on every shard at once, merged newest first."""

    async def one(shard: int) -> list[JobRecord] | None:
        try:
            return await ctx.store.search_jobs(shard, params)
        except ShardUnavailable:
            return None

    pages = await asyncio.gather(*(one(s) for s in range(ctx.shards.shard_count)))
    missing = [s for s, page in enumerate(pages) if page is None]
    merged = sorted(
        ((job, s) for s, page in enumerate(pages) for job in page or ()),
        key=lambda pair: pair[0].id,
        reverse=True,
    )
    # A shard that filled its page may hold more below it.
    more = len(merged) > params.limit or any(
        page is not None and len(page) >= params.limit for page in pages
    )
    return JobPage(merged[: params.limit], more, missing)


async def retry_job(ctx: Services, owner: str, job_id: str) -> tuple[JobRecord, int]:
    """A FAILED or CANCELLED job runs again: same id and scheduled time, a
    new series of attempts numbered on from the last (409 otherwise)."""
    jid, _ = locate(ctx, job_id)
    params = RetryJobParams(jid, owner, by=owner)
    return await owner_and(ctx, jid, lambda shard: ctx.store.retry_job(shard, params))


async def pause_job(ctx: Services, owner: str, job_id: str, reason: str) -> tuple[JobRecord, int]:
    """Hold a SCHEDULED one-shot job until resumed (409 once started)."""
    jid, _ = locate(ctx, job_id)
    params = PauseJobParams(jid, owner, reason)
    return await owner_and(ctx, jid, lambda shard: ctx.store.pause_job(shard, params))


async def resume_job(ctx: Services, owner: str, job_id: str) -> tuple[JobRecord, int]:
    """A paused job waits for its run time again, or starts at once."""
    jid, _ = locate(ctx, job_id)
    params = ResumeJobParams(jid, owner, far_horizon_seconds=ctx.settings.far_horizon_seconds)
    return await owner_and(ctx, jid, lambda shard: ctx.store.resume_job(shard, params))


@dataclass
class BulkResult:
    """What a bulk action did: the jobs acted on (or, dry, that would be),
    those refused with why, whether more may match and where to go on
    (below every job examined), the shards not read."""

    dry_run: bool
    done: list[str] = field(default_factory=list)
    failed: list[tuple[str, VakitError]] = field(default_factory=list)
    more: bool = False
    next_cursor: str | None = None
    missing: list[int] = field(default_factory=list)


def retry_statuses(statuses: Sequence[JobStatus]) -> None:
    """Only FAILED and CANCELLED jobs can be retried (422 otherwise)."""
    refused = [x.value for x in statuses if x not in RETRYABLE]
    if refused:
        raise InvalidRequest(
            f"only FAILED and CANCELLED jobs can be retried, not {', '.join(refused)}",
            field="status",
        )


def cancel_statuses(statuses: Sequence[str] | None) -> tuple[JobStatus, ...]:
    """What a bulk cancel takes: SCHEDULED jobs, whatever else is asked (422)."""
    if statuses is not None and list(statuses) != ["SCHEDULED"]:
        raise InvalidRequest("only SCHEDULED jobs can be cancelled", field="status")
    return (JobStatus.SCHEDULED,)


async def bulk_retry(ctx: Services, params: JobSearchParams, dry_run: bool) -> BulkResult:
    """Retry the jobs ``params`` match (their statuses must be retryable)."""
    retry_statuses(params.statuses or ())
    return await _bulk(ctx, params, dry_run, "retry")


async def bulk_cancel(ctx: Services, params: JobSearchParams, dry_run: bool) -> BulkResult:
    """Cancel the SCHEDULED jobs ``params`` match (paused ones too)."""
    cancel_statuses([s.value for s in params.statuses or ()])
    return await _bulk(ctx, params, dry_run, "cancel")


async def _bulk(ctx: Services, params: JobSearchParams, dry_run: bool, act: str) -> BulkResult:
    page = await search_jobs(ctx, params)
    out = BulkResult(dry_run, more=page.more, missing=page.missing)
    owner = params.owner
    for job, shard in page.jobs:
        text = job_id_text(job.id)
        if dry_run:
            out.done.append(text)
            continue
        try:
            if act == "retry":
                await ctx.store.retry_job(shard, RetryJobParams(job.id, owner, by=owner))
            else:
                await ctx.store.cancel_job(shard, CancelParams(job.id, owner))
        except VakitError as exc:
            out.failed.append((text, exc))
            continue
        out.done.append(text)
    # Below every job examined: the next call meets neither the jobs acted
    # on (a retried one is SCHEDULED again, but a cancelled one would still
    # match a retry's CANCELLED) nor the ones refused.
    out.next_cursor = page.next_cursor
    return out
