"""The API's request and response bodies, and their validation (targets and
times are the service layer's documents, :mod:`cluster.services.documents`).

Unknown fields are rejected (a typo such as ``maxAttempt`` must not be
silently ignored), times must be RFC 3339 with an offset, and limits are
checked here so that bad input is a 4xx that changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    field_validator,
)

from cluster.instants import format_instant
from cluster.services.documents import (
    Rfc3339,
    TargetIn,
    target_dict,
)
from cluster.services.documents import Strict as _Strict
from cluster.services.job_document import BatchJobIn, CreateJobIn, fingerprint, utc_instant

__all__ = [
    "MAX_BATCH",
    "AttemptOut",
    "BatchCreateJobsIn",
    "BatchCreateJobsOut",
    "BatchJobIn",
    "BatchJobResult",
    "CreateJobIn",
    "CreateJobOut",
    "JobOut",
    "PatchJobIn",
    "ProblemOut",
    "Rfc3339",
    "TargetIn",
    "ValidBatchCreateJobsIn",
    "batch_item",
    "fingerprint",
    "target_dict",
]


UtcDatetime = Annotated[datetime, PlainSerializer(format_instant, return_type=str)]


class PatchJobIn(_Strict):
    runAt: Rfc3339

    @field_validator("runAt")
    @classmethod
    def _run_at(cls, value: str) -> str:
        utc_instant(value)  # parsed once: the handler's run_at() is a cache hit
        return value


class CreateJobOut(BaseModel):
    jobId: str
    status: str


class AttemptOut(BaseModel):
    attempt: int
    worker: str | None
    startedAt: UtcDatetime | None
    finishedAt: UtcDatetime
    outcome: str
    error: str | None
    latenessSeconds: float | None


class JobOut(BaseModel):
    jobId: str
    type: str
    status: str
    runAt: UtcDatetime
    scheduledFor: UtcDatetime
    attempt: int
    maxAttempts: int
    timeoutSeconds: int
    shard: int
    target: dict[str, Any]
    payload: Any
    lastError: str | None
    idempotencyKey: str | None = None
    cronJobId: str | None = None
    createdAt: UtcDatetime | None = None
    finishedAt: UtcDatetime | None = None
    attempts: list[AttemptOut] = Field(default_factory=list)
    paused: bool = False
    pausedAt: UtcDatetime | None = None
    pauseReason: str | None = None
    labels: dict[str, str] = Field(default_factory=dict, description="{} when it has none.")


# -- batch create -----------------------------------------------------------

MAX_BATCH = 1000


def batch_item(value: Any) -> Any:
    """An item of a batch as the envelope takes it: any value, answered on
    its own (the handler validates each)."""
    return value


# Items are validated one by one in the handler, so that one bad job gets its
# own 422 and the others go ahead; the envelope only holds them. The document
# says so: an item is a BatchJobIn, or any other value, which is answered
# with its own 422 in the results.
_RawBatchJob = Annotated[
    Any,
    PlainValidator(batch_item, json_schema_input_type=BatchJobIn | Any),
]


class BatchCreateJobsIn(_Strict):
    jobs: list[_RawBatchJob] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description="Each a BatchJobIn. Any other value gets its own 422 in `results`, and the "
        "others go ahead.",
    )


class ValidBatchCreateJobsIn(_Strict):
    """A batch whose every item is valid, as nearly every batch is: the
    envelope and its items validated in one pass over the JSON text, 4 us
    an item against 7 for parsing it and validating item by item. A batch
    this refuses is taken item by item (:class:`BatchCreateJobsIn`), so each
    bad job gets its own answer and the others go ahead."""

    jobs: list[BatchJobIn] = Field(min_length=1, max_length=MAX_BATCH)


class ProblemOut(BaseModel):
    """An ``application/problem+json`` body (RFC 9457); extension members
    (``field``, ``errors``, ``shard``…) may follow."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str


class BatchJobResult(BaseModel):
    """One job's outcome: ``jobId`` and ``jobStatus`` when it was created
    (201) or was a repeat (200), a ``problem`` otherwise (409, 413, 422,
    503…), exactly as a single create would have answered."""

    index: int = Field(description="The job's position in the request.")
    status: int
    jobId: str | None = None
    jobStatus: str | None = None
    problem: ProblemOut | None = None


class BatchCreateJobsOut(BaseModel):
    results: list[BatchJobResult] = Field(description="One per job, in request order.")
