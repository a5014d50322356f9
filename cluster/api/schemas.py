"""The API's request and response bodies, and their validation.

Unknown fields are rejected (a typo such as ``maxAttempt`` must not be
silently ignored), times must be RFC 3339 with an offset, and limits are
checked here so that bad input is a 4xx that changes nothing.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    field_validator,
)

from cluster.instants import EARLIEST, LATEST, format_instant, parse_instant, utc
from cluster.model.jsontext import canonical_json

__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_BATCH",
    "AttemptOut",
    "BatchCreateJobsIn",
    "BatchCreateJobsOut",
    "BatchJobIn",
    "BatchJobResult",
    "CreateJobIn",
    "CreateJobOut",
    "HttpTargetIn",
    "JobOut",
    "KafkaTargetIn",
    "NoopTargetIn",
    "PatchJobIn",
    "ProblemOut",
    "TargetIn",
    "ValidBatchCreateJobsIn",
    "fingerprint",
    "format_utc",
    "parse_rfc3339",
    "target_dict",
]

# RFC 3339 in and out: the kernel's (cluster.instants), under the names the
# API's modules import.
parse_rfc3339 = parse_instant
format_utc = format_instant


@lru_cache(maxsize=1024)
def _utc_instant(value: str) -> datetime:
    """A runAt the validator accepted, in UTC: a batch's jobs usually share
    one, and a single create's repeat (a retry) has the same."""
    return utc(parse_instant(value, "runAt"))


Rfc3339 = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


UtcDatetime = Annotated[datetime, PlainSerializer(format_utc, return_type=str)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=False)


class HttpTargetIn(_Strict):
    kind: Literal["HTTP"]
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="An absolute http(s) URL, ASCII, its host among those granted to the "
        "owner; addresses that are not public are refused unless the operator allows them.",
    )
    headers: dict[str, str] | None = Field(
        None,
        description="Extra request headers. Credentials, hop-by-hop and forwarding headers "
        "(the operator's deny list), Vakit-* and Webhook-* are refused.",
    )

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return value
        if len(value) > 20:
            raise ValueError("at most 20 extra headers")
        for name, val in value.items():
            if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", name):
                raise ValueError(f"invalid header name {name!r}")
            if len(val) > 1024 or "\r" in val or "\n" in val:
                raise ValueError(f"invalid value for header {name!r}")
        # Which names may be set is the operator's and Vakit's choice
        # (cluster.targets.scope), checked with the owner's grants.
        return value


class KafkaTargetIn(_Strict):
    kind: Literal["KAFKA"]
    topic: str = Field(
        pattern=r"^[A-Za-z0-9._-]{1,249}$",
        description="Starts with a prefix granted to the owner; names starting with '_', "
        "'.' and '..' are refused.",
    )
    key: str | None = Field(None, max_length=1024)


class NoopTargetIn(_Strict):
    kind: Literal["NOOP"]


TargetIn = Annotated[HttpTargetIn | KafkaTargetIn | NoopTargetIn, Field(discriminator="kind")]


def target_dict(target: HttpTargetIn | KafkaTargetIn | NoopTargetIn) -> dict[str, Any]:
    """``target.model_dump(exclude_none=True)``: the fields that are set, in
    their order. Every create makes one (1,000 a batch), and model_dump's
    dozen keyword arguments cost 1.0 us where the fields' own dict costs 0.4;
    a target's fields are plain values (a headers dict, no models inside)."""
    return {name: value for name, value in target.__dict__.items() if value is not None}


class CreateJobIn(_Strict):
    type: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    runAt: Rfc3339
    target: TargetIn
    payload: Any = None
    maxAttempts: int = Field(5, ge=1, le=100)
    timeoutSeconds: int = Field(60, ge=1, le=86400)

    @field_validator("runAt")
    @classmethod
    def _run_at(cls, value: str) -> str:
        _utc_instant(value)  # parsed once: the handler's run_at() is a cache hit
        return value

    def run_at(self) -> datetime:
        """``runAt`` as an instant in UTC."""
        return _utc_instant(self.runAt)


class PatchJobIn(_Strict):
    runAt: Rfc3339

    @field_validator("runAt")
    @classmethod
    def _run_at(cls, value: str) -> str:
        _utc_instant(value)  # parsed once: the handler's run_at() is a cache hit
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


def fingerprint(body: BaseModel, exclude: set[str] | None = None) -> str:
    """A stable digest of a request, to tell a repeat from a reuse of a key.

    ``runAt`` counts as the instant it names, not its spelling: ``…09:30:00Z``
    and ``…12:30:00+03:00`` are one request. The instant is written as UTC
    with ``Z`` and no zero fraction, which is how most clients spell it, so
    the digests of such requests are the ones stored before this rule; a key
    first used with another spelling before it answers a repeat with 409.
    The digest is stored with the key, so its recipe must not change again:
    a repeat sent after an upgrade must still match the first request."""
    # model_dump's own serializer, called without the wrapper's dozen keyword
    # arguments (1.5 against 2.1 us an item of a keyed batch); the same dict.
    data = body.__pydantic_serializer__.to_python(body, mode="json", exclude=exclude)
    run_at = data.get("runAt")
    if isinstance(run_at, str):
        data["runAt"] = _instant_text(run_at)
    return hashlib.sha256(canonical_json(data)).hexdigest()


@lru_cache(maxsize=1024)
def _instant_text(run_at: str) -> str:
    """``runAt`` as the fingerprint writes it. Cached as its parse is: the
    items of a batch often share their instant, and this was a fifth of a
    keyed item's fingerprint."""
    return format_instant(parse_instant(run_at, "runAt"))


# -- batch create -----------------------------------------------------------

MAX_BATCH = 1000


class BatchJobIn(CreateJobIn):
    """One job of a batch: a single create's body, and its own key."""

    idempotencyKey: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="As the Idempotency-Key header of a single create, per job.",
    )


# Items are validated one by one in the handler, so that one bad job gets its
# own 422 and the others go ahead; the envelope only holds them. The schema
# still documents each item as a BatchJobIn.
_RawBatchJob = Annotated[Any, PlainValidator(lambda v: v, json_schema_input_type=BatchJobIn)]


class BatchCreateJobsIn(_Strict):
    jobs: list[_RawBatchJob] = Field(min_length=1, max_length=MAX_BATCH)


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
