"""Vakit's Python client: create, find and cancel jobs and keep cron jobs,
sync (:class:`Client`) or async (:class:`AsyncClient`), and check the
firings your service receives (:func:`verify_firing`).

    from vakit_client import Client, ProblemError

    with Client("http://127.0.0.1:8080", token) as vakit:
        job = vakit.create_job(type="report", run_at=when, target={...}, payload={...})
"""

from __future__ import annotations

from vakit_client.async_client import AsyncClient
from vakit_client.client import Client
from vakit_client.errors import (
    PROBLEM_TYPES,
    Conflict,
    CoordinationUnavailable,
    Forbidden,
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    InternalError,
    InvalidRequest,
    InvalidSignature,
    MalformedJson,
    MethodNotAllowed,
    NotFound,
    PartialResults,
    PayloadTooLarge,
    ProblemError,
    ShardUnavailable,
    TooManyRequests,
    TransportError,
    Unauthorized,
    VakitClientError,
)
from vakit_client.firings import Firing, verify_firing
from vakit_client.models import (
    BackfillResult,
    BackfillSlot,
    BatchItem,
    Calendar,
    CreatedJob,
    Cron,
    CronChange,
    Fire,
    Job,
    Limit,
    Preview,
    Triggered,
)
from vakit_client.retrying import RetryPolicy

__version__ = "0.1.0"

__all__ = [
    "PROBLEM_TYPES",
    "AsyncClient",
    "BackfillResult",
    "BackfillSlot",
    "BatchItem",
    "Calendar",
    "Client",
    "Conflict",
    "CoordinationUnavailable",
    "CreatedJob",
    "Cron",
    "CronChange",
    "Fire",
    "Firing",
    "Forbidden",
    "IdempotencyKeyInFlight",
    "IdempotencyKeyReused",
    "InternalError",
    "InvalidRequest",
    "InvalidSignature",
    "Job",
    "Limit",
    "MalformedJson",
    "MethodNotAllowed",
    "NotFound",
    "PartialResults",
    "PayloadTooLarge",
    "Preview",
    "ProblemError",
    "RetryPolicy",
    "ShardUnavailable",
    "TooManyRequests",
    "TransportError",
    "Triggered",
    "Unauthorized",
    "VakitClientError",
    "verify_firing",
]
