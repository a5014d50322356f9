"""What the API answers, as typed values. Each keeps the whole JSON document
it was read from in ``raw``: a field the server adds later is there before
this package names it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

__all__ = [
    "BackfillResult",
    "BackfillSlot",
    "BatchItem",
    "Calendar",
    "CreatedJob",
    "Cron",
    "CronChange",
    "Fire",
    "Job",
    "Limit",
    "Preview",
    "Triggered",
    "format_instant",
    "parse_instant",
]


def parse_instant(text: str | None) -> datetime | None:
    """An RFC 3339 instant of the API (``…Z`` or with an offset)."""
    if text is None:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def format_instant(value: datetime | str, name: str) -> str:
    """An instant for the API; a naive datetime is refused here rather than
    read in some time zone the caller did not mean."""
    if isinstance(value, str):
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime (with tzinfo), got {value!r}")
    return value.isoformat()


def _required(text: str | None) -> datetime:
    parsed = parse_instant(text)
    if parsed is None:
        raise ValueError("the API left out an instant it always sends")
    return parsed


@dataclass(frozen=True)
class CreatedJob:
    """A create's answer. ``replayed``: an earlier request with the same
    Idempotency-Key created it (HTTP 200), this one created nothing."""

    id: str
    status: str
    idempotency_key: str | None
    replayed: bool = False


@dataclass(frozen=True)
class Job:
    id: str
    type: str
    status: str
    run_at: datetime
    scheduled_for: datetime
    attempt: int
    max_attempts: int
    target: dict[str, Any]
    payload: Any
    last_error: str | None
    idempotency_key: str | None
    cron_job_id: str | None
    finished_at: datetime | None
    paused: bool
    labels: dict[str, str]
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Job:
        return cls(
            id=doc["jobId"],
            type=doc["type"],
            status=doc["status"],
            run_at=_required(doc["runAt"]),
            scheduled_for=_required(doc["scheduledFor"]),
            attempt=doc["attempt"],
            max_attempts=doc["maxAttempts"],
            target=doc["target"],
            payload=doc.get("payload"),
            last_error=doc.get("lastError"),
            idempotency_key=doc.get("idempotencyKey"),
            cron_job_id=doc.get("cronJobId"),
            finished_at=parse_instant(doc.get("finishedAt")),
            paused=bool(doc.get("paused", False)),
            labels=doc.get("labels") or {},
            raw=doc,
        )


@dataclass(frozen=True)
class BatchItem:
    """One job of a batch create: ``status`` 201 (created) or 200 (a repeat)
    with ``job_id``, or another status with ``error`` (the exception its
    problem maps to). ``idempotency_key`` is the one the job was sent with."""

    index: int
    status: int
    idempotency_key: str | None
    job_id: str | None = None
    job_status: str | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Cron:
    id: str
    name: str
    schedule: str
    time_zone: str
    type: str
    target: dict[str, Any]
    payload: Any
    enabled: bool
    paused: bool
    pause_reason: str | None
    next_fire_at: datetime | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Cron:
        return cls(
            id=doc["cronJobId"],
            name=doc["name"],
            schedule=doc["schedule"],
            time_zone=doc["timeZone"],
            type=doc["type"],
            target=doc["target"],
            payload=doc.get("payload"),
            enabled=doc["enabled"],
            paused=bool(doc.get("paused", False)),
            pause_reason=doc.get("pauseReason"),
            next_fire_at=parse_instant(doc.get("nextFireAt")),
            raw=doc,
        )


@dataclass(frozen=True)
class Calendar:
    """Business days that crons follow: each change is a new ``version``."""

    name: str
    time_zone: str
    exclude_dates: list[date]
    include_dates: list[date]
    business_week: list[str]
    description: str | None
    version: int
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Calendar:
        return cls(
            name=doc["name"],
            time_zone=doc["timeZone"],
            exclude_dates=[date.fromisoformat(d) for d in doc["excludeDates"]],
            include_dates=[date.fromisoformat(d) for d in doc["includeDates"]],
            business_week=list(doc["businessWeek"]),
            description=doc.get("description"),
            version=doc["version"],
            raw=doc,
        )


@dataclass(frozen=True)
class Limit:
    """A key's limit for the whole cluster (an HTTP host, ``kafka:<topic>``)."""

    key: str
    concurrency: int | None
    rate: float | None
    burst: float | None
    source: str  # "config" (VAKIT_TARGET_LIMITS) or "runtime" (set through the API)
    effective_concurrency: int | None
    consistent: bool  # every shard holds the same run-time limit
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Limit:
        return cls(
            key=doc["key"],
            concurrency=doc.get("concurrency"),
            rate=doc.get("rate"),
            burst=doc.get("burst"),
            source=doc["source"],
            effective_concurrency=doc.get("effectiveConcurrency"),
            consistent=doc["consistent"],
            raw=doc,
        )


@dataclass(frozen=True)
class Fire:
    scheduled_for: datetime
    local: str  # the wall-clock time in the cron's zone
    note: str | None  # a DST or month-end note


@dataclass(frozen=True)
class Preview:
    fires: list[Fire]
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Preview:
        fires = [
            Fire(_required(f["scheduledFor"]), f["local"], f.get("note")) for f in doc["fires"]
        ]
        return cls(fires, doc)


@dataclass(frozen=True)
class Triggered:
    job_id: str
    scheduled_for: datetime


@dataclass(frozen=True)
class BackfillSlot:
    scheduled_for: datetime
    job_id: str | None
    outcome: str  # created, exists or rerun
    status: str | None


@dataclass(frozen=True)
class BackfillResult:
    """``next_from``: more slots remain from there (one call makes at most
    1,000); ``backfill_cron`` follows it unless told not to."""

    dry_run: bool
    slots: list[BackfillSlot]
    created: int
    existing: int
    rerun: int
    next_from: datetime | None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> BackfillResult:
        return cls(
            dry_run=doc["dryRun"],
            slots=[
                BackfillSlot(
                    _required(s["scheduledFor"]), s.get("jobId"), s["outcome"], s.get("status")
                )
                for s in doc["slots"]
            ],
            created=doc["created"],
            existing=doc["existing"],
            rerun=doc["rerun"],
            next_from=parse_instant(doc.get("nextFrom")),
        )

    def merged(self, more: BackfillResult) -> BackfillResult:
        return BackfillResult(
            self.dry_run,
            self.slots + more.slots,
            self.created + more.created,
            self.existing + more.existing,
            self.rerun + more.rerun,
            more.next_from,
        )


@dataclass(frozen=True)
class CronChange:
    """One step of ``apply_crons``: ``create``, ``update``, ``delete`` or
    ``unchanged``; ``fields`` are the ones an update sets."""

    action: str
    name: str
    cron_job_id: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
