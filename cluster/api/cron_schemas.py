"""The cron-jobs API's request and response bodies (``/api/v1/cron-jobs``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, PlainValidator, StrictBool, model_validator

from cluster.api.schemas import (
    MAX_BATCH,
    ProblemOut,
    Rfc3339,
    TargetIn,
    UtcDatetime,
    batch_item,
)
from cluster.services.cron_document import (
    MAX_RUNS,
    NAME,
    Bounds,
    CalendarPolicy,
    Concurrency,
    CreateCronIn,
    Dst,
    Misfire,
    MonthEnd,
)
from cluster.services.documents import Strict as _Strict

__all__ = [
    "BatchCreateCronsIn",
    "BatchCreateCronsOut",
    "BatchCronResult",
    "CreateCronIn",
    "CronListOut",
    "CronOut",
    "FireOut",
    "PatchCronIn",
    "PreviewOut",
    "RunOut",
    "RunsOut",
    "TriggerOut",
]


def _no_null_branches(schema: dict[str, Any]) -> None:
    """The document says what _no_null_for_required checks: null is no value
    for a field outside _NULLABLE."""
    for name, prop in schema.get("properties", {}).items():
        branches = prop.get("anyOf")
        if name in _NULLABLE or not branches:
            continue
        kept = [b for b in branches if b.get("type") != "null"]
        if prop.get("default", ...) is None:
            del prop["default"]
        if len(kept) == 1:
            del prop["anyOf"]
            prop.update(kept[0])
        else:
            prop["anyOf"] = kept


class PatchCronIn(Bounds):
    model_config = Bounds.model_config | {"json_schema_extra": _no_null_branches}

    schedule: str | None = Field(None, min_length=1, max_length=200)
    timeZone: str | None = Field(None, min_length=1, max_length=64)
    type: str | None = Field(None, min_length=1, max_length=64, pattern=NAME)
    target: TargetIn | None = None
    payload: Any = None
    misfirePolicy: Misfire | None = None
    concurrency: Concurrency | None = None
    jitterSeconds: int | None = Field(None, ge=0, le=86400)
    maxAttempts: int | None = Field(None, ge=1, le=100)
    timeoutSeconds: int | None = Field(None, ge=1, le=86400)
    startingDeadlineSeconds: int | None = Field(None, ge=1, le=7 * 86400)
    enabled: StrictBool | None = None
    monthEndPolicy: MonthEnd | None = None
    dstPolicy: Dst | None = None
    calendar: str | None = Field(
        None, min_length=1, max_length=200, description="null stops following a calendar."
    )
    calendarPolicy: CalendarPolicy | None = None
    startAt: Rfc3339 | None = Field(None, description="null removes the bound.")
    endAt: Rfc3339 | None = Field(None, description="null removes the bound.")
    maxRuns: int | None = Field(None, ge=1, le=MAX_RUNS, description="null removes the bound.")

    @model_validator(mode="after")
    def _no_null_for_required(self) -> PatchCronIn:
        # Absent means "keep"; null is only meaningful where the field may be
        # empty (payload, startingDeadlineSeconds). Elsewhere it was a 500.
        nulled = sorted(k for k in self.model_fields_set - _NULLABLE if getattr(self, k) is None)
        if nulled:
            raise ValueError(f"{', '.join(nulled)} cannot be null; leave a field out to keep it")
        return self


_NULLABLE = {
    "payload", "startingDeadlineSeconds", "startAt", "endAt", "maxRuns", "calendar",
    "calendarPolicy",
}  # fmt: skip


class CronOut(BaseModel):
    cronJobId: str
    name: str
    schedule: str
    scheduleKind: str
    timeZone: str
    type: str
    target: dict[str, Any]
    payload: Any
    misfirePolicy: str
    concurrency: str
    jitterSeconds: int
    maxAttempts: int
    timeoutSeconds: int
    startingDeadlineSeconds: int | None
    enabled: bool
    monthEndPolicy: str
    dstPolicy: str
    startAt: UtcDatetime | None
    endAt: UtcDatetime | None
    maxRuns: int | None
    runCount: int = Field(
        description="Occurrences the schedule made (manual triggers not counted)."
    )
    shard: int
    nextFireAt: UtcDatetime | None
    lastFireAt: UtcDatetime | None
    lastSuccessAt: UtcDatetime | None
    missedCount: int
    skippedCount: int
    createdAt: UtcDatetime | None
    updatedAt: UtcDatetime | None
    paused: bool = False
    pausedAt: UtcDatetime | None = None
    pauseReason: str | None = None
    lastResult: Literal["SUCCEEDED", "FAILED", "SKIPPED"] | None = Field(
        None,
        description="The outcome of the occurrence that finished last (a cancelled one aside); "
        "null before the first.",
    )
    lastResultAt: UtcDatetime | None = Field(None, description="When that occurrence finished.")
    calendar: str | None = Field(None, description="The calendar it follows, if any.")
    calendarPolicy: str | None = Field(
        None,
        description="SKIP, NEXT_BUSINESS_DAY or PREVIOUS_BUSINESS_DAY: a slot on a day the "
        "calendar does not work.",
    )


class CronListOut(BaseModel):
    items: list[CronOut]
    nextCursor: str | None


class FireOut(BaseModel):
    scheduledFor: UtcDatetime
    local: str
    note: str | None
    runAt: UtcDatetime | None = Field(
        None,
        description="When a calendar moved the run (calendarPolicy NEXT_BUSINESS_DAY or "
        "PREVIOUS_BUSINESS_DAY); "
        "scheduledFor stays the occurrence's identity.",
    )


class PreviewOut(BaseModel):
    fires: list[FireOut]
    end: str | None = Field(
        None, description="Why fewer fires than asked: endAt or maxRuns reached."
    )
    monthEndPolicy: str = "SKIP"
    dstPolicy: str = "CRONIE"
    calendar: str | None = None
    calendarVersion: int | None = Field(
        None, description="The version of the calendar the preview was computed with."
    )


class RunOut(BaseModel):
    jobId: str
    scheduledFor: UtcDatetime
    runAt: UtcDatetime
    status: str
    attempt: int
    lastError: str | None
    finishedAt: UtcDatetime | None
    latenessSeconds: float | None


class RunsOut(BaseModel):
    runs: list[RunOut]


class TriggerOut(BaseModel):
    jobId: str
    scheduledFor: UtcDatetime


# -- batch create -----------------------------------------------------------

# Items are validated one by one in the handler (one bad cron gets its own
# 422); the document says so: a CreateCronIn, or any other value, answered
# with its own 422.
_RawCron = Annotated[
    Any,
    PlainValidator(batch_item, json_schema_input_type=CreateCronIn | Any),
]


class BatchCreateCronsIn(_Strict):
    cronJobs: list[_RawCron] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description="Each a CreateCronIn. Any other value gets its own 422 in `results`, and the "
        "others go ahead.",
    )


class BatchCronResult(BaseModel):
    """One cron's outcome: ``cronJobId`` when it was created (201) or was
    already defined with the same body (200), a ``problem`` otherwise."""

    index: int = Field(description="The cron's position in the request.")
    status: int
    cronJobId: str | None = None
    problem: ProblemOut | None = None


class BatchCreateCronsOut(BaseModel):
    results: list[BatchCronResult] = Field(description="One per cron, in request order.")
