"""Bodies of the operators' endpoints: job search, retry, bulk actions,
pause and resume, cron backfill (``/api/v1/jobs…``, ``/api/v1/cron-jobs/{id}/…``).

The shapes are a contract the ``vakit`` CLI builds on: fields are added,
never renamed or removed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, StrictBool, field_validator

from cluster.api.openapi import problem_responses
from cluster.api.schemas import JobOut, Rfc3339, UtcDatetime
from cluster.instants import parse_instant
from cluster.services.cron_actions import MAX_BACKFILL
from cluster.services.documents import Strict as _Strict

__all__ = [
    "MAX_BACKFILL",
    "MAX_BULK",
    "BackfillIn",
    "BackfillOut",
    "BackfillSlotOut",
    "BulkCancelIn",
    "BulkFailure",
    "BulkJobsIn",
    "BulkJobsOut",
    "BulkRetryIn",
    "JobPageOut",
    "LatenessMinuteOut",
    "LatenessOut",
    "PauseIn",
    "ShardLatenessOut",
    "problems",
]

# Slots one backfill call writes; a longer range is continued from nextFrom.
# Jobs one bulk retry or cancel acts on; the next call takes the next ones.
MAX_BULK = 1000


_PROBLEM_TEXT = {
    404: "No such job or cron job (another owner's is 404 too).",
    409: "Not in a state that allows it (the detail says which).",
    422: "A filter, a time or a body field is invalid (the detail names it).",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route: its problem+json answers, each with the
    problem types of its status (:func:`~cluster.api.openapi.problem_responses`)."""
    out = problem_responses(*statuses)
    for s in statuses:
        out[s]["description"] = f"{_PROBLEM_TEXT[s]} {out[s]['description']}"
    return out


def _rfc3339(value: str | None, name: str) -> str | None:
    if value is not None:
        parse_instant(value, name)
    return value


class JobPageOut(BaseModel):
    """A page of ``GET /api/v1/jobs``, newest job first."""

    items: list[JobOut]
    nextCursor: str | None = Field(
        description="Pass as `cursor` for the next page; null on the last page."
    )
    missingShards: list[int] = Field(
        description="Shards that could not be read: their jobs are missing from this page. "
        "Empty when the answer is complete."
    )


class PauseIn(_Strict):
    reason: str = Field(min_length=1, max_length=500, description="Why; shown in GET and lists.")


class BulkJobsIn(_Strict):
    """The filters of ``GET /api/v1/jobs``, as a body, but ``status``, whose
    values are each action's (:class:`BulkRetryIn`, :class:`BulkCancelIn`)."""

    type: str | None = Field(None, min_length=1, max_length=64)
    cronJobId: str | None = Field(None, min_length=1, max_length=64)
    runAtFrom: Rfc3339 | None = None
    runAtTo: Rfc3339 | None = None
    finishedFrom: Rfc3339 | None = None
    finishedTo: Rfc3339 | None = None
    limit: int = Field(100, ge=1, le=MAX_BULK, description="At most this many jobs per call.")
    dryRun: StrictBool = Field(
        False, description="Say which jobs would be acted on; change nothing."
    )
    cursor: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="The previous call's nextCursor: go on below the jobs it examined, so a "
        "job it was refused for is not met again.",
    )

    @field_validator("runAtFrom", "runAtTo", "finishedFrom", "finishedTo")
    @classmethod
    def _times(cls, value: str | None) -> str | None:
        return _rfc3339(value, "time")


class BulkRetryIn(BulkJobsIn):
    """A bulk retry's filters: FAILED and/or CANCELLED jobs (FAILED without ``status``)."""

    status: list[Literal["FAILED", "CANCELLED"]] | None = Field(None, min_length=1, max_length=6)


class BulkCancelIn(BulkJobsIn):
    """A bulk cancel's filters: SCHEDULED jobs only (``status`` may say so, once)."""

    status: list[Literal["SCHEDULED"]] | None = Field(None, min_length=1, max_length=1)


class BulkFailure(BaseModel):
    jobId: str
    status: int
    detail: str


class BulkJobsOut(BaseModel):
    dryRun: bool
    jobIds: list[str] = Field(
        description="The jobs acted on (with dryRun: the jobs that would be), newest first."
    )
    failed: list[BulkFailure] = Field(
        description="Matched jobs the action was refused for (one that started meanwhile…)."
    )
    more: bool = Field(description="More jobs may match: call again (after a dry run, use limit).")
    nextCursor: str | None = Field(
        None,
        description="With more: the cursor for the next call, below every job this one examined "
        "(acted on or refused).",
    )
    missingShards: list[int]


class BackfillIn(_Strict):
    from_: Rfc3339 = Field(alias="from", description="First instant of the range (included).")
    to: Rfc3339 = Field(description="End of the range (excluded); not in the future.")
    overlap: Literal["ALLOW", "SKIP"] = Field(
        "ALLOW",
        description="ALLOW: the slots run side by side, whatever else of this cron is pending "
        "or running. SKIP: nothing is written while an occurrence is pending or running (409).",
    )
    rerun: StrictBool = Field(
        False, description="Run slots that already ran again, with a new attempt series."
    )
    dryRun: StrictBool = Field(False, description="Say what would happen; write nothing.")

    model_config = _Strict.model_config | {"populate_by_name": True}

    @field_validator("from_", "to")
    @classmethod
    def _times(cls, value: str) -> str:
        parse_instant(value, "time")
        return value


class BackfillSlotOut(BaseModel):
    scheduledFor: UtcDatetime
    jobId: str | None = Field(
        description="The slot's job; null in a dry run for a slot that would be created."
    )
    outcome: Literal["created", "exists", "rerun"] = Field(
        description="created: a new occurrence; exists: the slot has one (pending, or it ran) "
        "and is not doubled; rerun: it ran and runs again with a new attempt series."
    )
    status: str | None = Field(None, description="The existing occurrence's status.")


class BackfillOut(BaseModel):
    dryRun: bool
    slots: list[BackfillSlotOut]
    created: int
    existing: int
    rerun: int
    nextFrom: UtcDatetime | None = Field(
        description=f"The range holds more than {MAX_BACKFILL} slots: call again from here."
    )


class LatenessMinuteOut(BaseModel):
    """Start lateness of the attempts that ended in one UTC minute."""

    minute: UtcDatetime = Field(description="The minute's first instant.")
    count: int = Field(description="Attempts that ended in the minute and logged a lateness.")
    p50Seconds: float
    p99Seconds: float
    maxSeconds: float


class ShardLatenessOut(BaseModel):
    shard: int
    minutes: list[LatenessMinuteOut] = Field(description="Minutes with an attempt, oldest first.")
    error: str | None = Field(
        None, description="Why the shard could not be read (then no minutes)."
    )


class LatenessOut(BaseModel):
    """``GET /api/v1/cluster/lateness``: how late jobs started, by minute.
    A percentile of the whole cluster cannot be made from each shard's, so
    ``cluster`` gives, per minute, the worst shard's p50, p99 and max (the
    cluster's own percentile is at most that) and the attempts of all shards."""

    windowMinutes: int
    cluster: list[LatenessMinuteOut]
    shards: list[ShardLatenessOut]
    missingShards: list[int] = Field(
        description="Shards that could not be read: their attempts are missing from `cluster`."
    )
