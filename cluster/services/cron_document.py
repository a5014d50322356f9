"""A cron job as users write it (the API's create body, an item of a
crons-as-code file) and its translation to the one
:class:`~cluster.model.CronDefinition` the builder reads.

pydantic, no web framework: the CLI checks a file with the rules the
server applies, and the benchmarks write their bodies with
:func:`document_of`.
"""

from __future__ import annotations

from datetime import datetime
from operator import itemgetter
from typing import Any, Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from cluster.instants import format_instant, parse_instant, utc
from cluster.model import CronDefinition
from cluster.services.documents import Rfc3339, Strict, TargetIn, target_dict

__all__ = [
    "DOCUMENT_FIELDS",
    "MAX_RUNS",
    "NAME",
    "Bounds",
    "CalendarPolicy",
    "Concurrency",
    "CreateCronIn",
    "Dst",
    "Misfire",
    "MonthEnd",
    "definition_of",
    "document_of",
    "instant",
]

# A cron's max_runs column is a PostgreSQL integer: a larger bound was a 500.
MAX_RUNS = 2**31 - 1
Misfire = Literal["RUN_ALL", "RUN_ONCE", "SKIP"]
Concurrency = Literal["ALLOW", "FORBID", "REPLACE"]
MonthEnd = Literal["SKIP", "CLAMP"]
Dst = Literal["CRONIE", "SKIP", "BOTH"]
CalendarPolicy = Literal["SKIP", "NEXT_BUSINESS_DAY", "PREVIOUS_BUSINESS_DAY"]
NAME = r"^[A-Za-z0-9_.:-]+$"
_ZONE_DOC = (
    "IANA zone the schedule is read in, e.g. 'Europe/Istanbul'. Required: a "
    "schedule's zone is written, never defaulted (a server default is whatever "
    "zone the operator happened to pick)."
)
_MONTH_END_DOC = (
    "Days 29-31 in a month without them: SKIP (cron's rule: no firing that "
    "month) or CLAMP (fire on the month's last day)."
)
_CALENDAR_DOC = (
    "The name of a calendar of yours (/api/v1/calendars): its business days decide "
    "what becomes of a slot on a day it does not work (calendarPolicy)."
)
_CALENDAR_POLICY_DOC = (
    "A slot on a day the calendar does not work: SKIP it (the default with a "
    "calendar), or move it to the NEXT_BUSINESS_DAY or PREVIOUS_BUSINESS_DAY at the "
    "same local time. The occurrence keeps the slot as its scheduledFor."
)
_DST_DOC = (
    "Fixed-time slots at DST changes: CRONIE (a slot in a gap fires once at "
    "the gap's end, a slot in an overlap only the first time), SKIP (a slot "
    "in a gap does not fire), BOTH (a slot in an overlap fires both times)."
)


class Bounds(Strict):
    """startAt, endAt, maxRuns: the same checks on create and on change."""

    @field_validator("startAt", "endAt", check_fields=False)
    @classmethod
    def _instant(cls, value: str | None) -> str | None:
        if value is not None:
            parse_instant(value, "time")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> Bounds:
        start, end = getattr(self, "startAt", None), getattr(self, "endAt", None)
        if start is not None and end is not None and parse_instant(start) > parse_instant(end):
            raise ValueError("startAt must not be after endAt")
        return self


class CreateCronIn(Bounds):
    name: str = Field(min_length=1, max_length=128, pattern=NAME)
    schedule: str = Field(
        min_length=1,
        max_length=200,
        description="5-field cron, @macro, 'every 15m' or 'every 15m fixed-delay'.",
    )
    timeZone: str = Field(min_length=1, max_length=64, description=_ZONE_DOC)
    type: str | None = Field(None, min_length=1, max_length=64, pattern=NAME)
    target: TargetIn
    payload: Any = None
    misfirePolicy: Misfire = "RUN_ONCE"
    concurrency: Concurrency = "ALLOW"
    jitterSeconds: int = Field(0, ge=0, le=86400)
    maxAttempts: int = Field(3, ge=1, le=100)
    timeoutSeconds: int = Field(60, ge=1, le=86400)
    startingDeadlineSeconds: int | None = Field(None, ge=1, le=7 * 86400)
    # Strict: JSON true or false, as the document says (not 0, 1 or "yes").
    enabled: StrictBool = True
    monthEndPolicy: MonthEnd = Field("SKIP", description=_MONTH_END_DOC)
    dstPolicy: Dst = Field("CRONIE", description=_DST_DOC)
    startAt: Rfc3339 | None = Field(None, description="No slot before this instant.")
    endAt: Rfc3339 | None = Field(None, description="No slot after this instant.")
    maxRuns: int | None = Field(
        None,
        ge=1,
        le=MAX_RUNS,
        description="At most this many occurrences by the schedule (manual triggers not counted).",
    )
    calendar: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$",
        description=_CALENDAR_DOC,
    )
    calendarPolicy: CalendarPolicy | None = Field(None, description=_CALENDAR_POLICY_DOC)


def instant(text: str | None) -> datetime | None:
    """An RFC 3339 text (validated already) as an aware UTC datetime."""
    return None if text is None else utc(parse_instant(text))


# A definition's fields by their names in a document (the API's), in order.
DOCUMENT_FIELDS = {
    "name": "name", "schedule": "schedule", "time_zone": "timeZone", "type": "type",
    "target": "target", "payload": "payload", "misfire_policy": "misfirePolicy",
    "concurrency": "concurrency", "jitter_seconds": "jitterSeconds",
    "max_attempts": "maxAttempts", "timeout_seconds": "timeoutSeconds",
    "starting_deadline_seconds": "startingDeadlineSeconds", "enabled": "enabled",
    "month_end_policy": "monthEndPolicy", "dst_policy": "dstPolicy", "start_at": "startAt",
    "end_at": "endAt", "max_runs": "maxRuns", "calendar": "calendar",
    "calendar_policy": "calendarPolicy",
}  # fmt: skip


# A body's values in the definition's order, read from the model's own
# field dict at once (a getattr per field through pydantic, then a dict of
# keywords, cost a cron of a batch more than the tuple they make).
_document_values = itemgetter(*(DOCUMENT_FIELDS[attr] for attr in CronDefinition._fields))
_AT = {attr: at for at, attr in enumerate(CronDefinition._fields)}
_SCHEDULE, _TARGET, _START, _END = (_AT[a] for a in ("schedule", "target", "start_at", "end_at"))


def definition_of(body: CreateCronIn) -> CronDefinition:
    """The definition a create body states (the schedule without its
    surrounding blanks, as the server keeps it)."""
    values = list(_document_values(body.__dict__))
    values[_SCHEDULE] = body.schedule.strip()
    values[_TARGET] = target_dict(body.target)
    values[_START] = instant(body.startAt)
    values[_END] = instant(body.endAt)
    return CronDefinition._make(values)


def document_of(definition: CronDefinition, *, compact: bool = False) -> dict[str, Any]:
    """The document (a create body) of ``definition``, by API names,
    instants as RFC 3339 UTC text. Whole, the type as the server fills it
    (what ``apply`` compares); ``compact``, only the fields that differ from
    their defaults (what a client sends: the server fills in the rest)."""
    out: dict[str, Any] = {}
    for attr, name in DOCUMENT_FIELDS.items():
        value = getattr(definition, attr)
        if compact and attr in _DEFAULTS and value == _DEFAULTS[attr]:
            continue
        out[name] = format_instant(value) if isinstance(value, datetime) else value
    if not compact:
        out["type"] = definition.record_type
    return out


_DEFAULTS = CronDefinition._field_defaults
