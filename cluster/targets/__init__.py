"""Targets: where a job fires. The contract; the kinds are described and
registered in :mod:`cluster.targets.kinds` (see :mod:`cluster.targets.registry`).

A target receives what a receiver needs to make the effect happen once:
``jobId``, ``scheduledFor`` (the logical time) and ``attempt``. It never runs
business logic of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _json_str
from typing import TYPE_CHECKING, Protocol

from cluster.instants import format_instant

if TYPE_CHECKING:
    # Annotations only: the CLI reads the kinds (cluster.targets.kinds) and
    # should not pay for the model's imports.
    from cluster.model import ClaimedJob

__all__ = ["FireResult", "Target", "firing_body", "idempotency_key"]


@dataclass(frozen=True, slots=True)
class FireResult:
    ok: bool
    retryable: bool = True
    error: str | None = None
    skipped: bool = False  # not fired at all (a cron occurrence past its deadline)
    # The target asked to be left alone this long (429/503 with Retry-After,
    # in seconds): the worker slows the target's limited key for the cluster.
    retry_after: float | None = None

    @classmethod
    def success(cls) -> FireResult:
        return _SUCCESS  # immutable: one instance serves every firing

    @classmethod
    def retry(cls, error: str) -> FireResult:
        return cls(ok=False, retryable=True, error=error)

    @classmethod
    def permanent(cls, error: str) -> FireResult:
        return cls(ok=False, retryable=False, error=error)

    @classmethod
    def skip(cls, error: str) -> FireResult:
        return cls(ok=False, retryable=False, error=error, skipped=True)


_SUCCESS = FireResult(ok=True, retryable=False)


class Target(Protocol):
    kind: str
    # True when fire() bounds itself by ``timeout``; otherwise the worker
    # wraps each firing in a timer of its own.
    enforces_timeout: bool

    async def fire(self, job: ClaimedJob, job_id: str, timeout: float) -> FireResult:
        """Deliver one firing. Must not raise for delivery failures: report them."""
        ...

    async def close(self) -> None: ...


def firing_body(job: ClaimedJob, job_id: str, scheduled_for: str | None = None) -> bytes:
    """The JSON document a firing carries (HTTP body, Kafka record value):
    ``{"jobId", "type", "scheduledFor", "attempt", "payload"}``, the payload
    spliced in as stored, and ``runAt`` after ``scheduledFor`` when this
    attempt was due at another time (a calendar moved the cron's run, or a
    retry's backoff): the nominal time and the actual one. ``scheduled_for``:
    the job's, already formatted (a target writes it three times a firing and
    formats it once)."""
    # Written out as json.dumps writes this dict (its separators, its ASCII
    # escapes: the same C function), byte for byte: a dict and the encoder's
    # machinery were most of the body's cost, made for every firing.
    moved = (
        f', "runAt": "{format_instant(job.run_at)}"' if job.run_at != job.scheduled_for else ""
    )
    return (
        f'{{"jobId": {_json_str(job_id)}, "type": {_json_str(job.type)}, '
        f'"scheduledFor": {_json_str(scheduled_for or format_instant(job.scheduled_for))}{moved}, '
        f'"attempt": {int(job.attempt)}, "payload": {job.payload_json}}}'
    ).encode()


def idempotency_key(job: ClaimedJob, job_id: str, scheduled_for: str | None = None) -> str:
    """Stable across attempts of one occurrence: what a receiver deduplicates on."""
    return f"{job_id}:{scheduled_for or format_instant(job.scheduled_for)}"
