"""The one error hierarchy of Vakit.

Store and target errors are translated once, at the seam, into these classes;
the API maps each to an HTTP status and an ``application/problem+json`` body.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Conflict",
    "CoordinationUnavailable",
    "InvalidRequest",
    "NotFound",
    "Overloaded",
    "ShardUnavailable",
    "Unauthorized",
    "VakitError",
]


class VakitError(Exception):
    """Base class. ``status`` is the HTTP status the API answers with."""

    status = 500
    title = "Internal error"

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = {k: v for k, v in fields.items() if v is not None}

    def __str__(self) -> str:
        if not self.fields:
            return self.message
        extra = ", ".join(f"{k}={v}" for k, v in self.fields.items())
        return f"{self.message} ({extra})"


class InvalidRequest(VakitError):
    status = 422
    title = "Invalid request"


class Unauthorized(VakitError):
    status = 401
    title = "Unauthorized"


class NotFound(VakitError):
    status = 404
    title = "Not found"


class Conflict(VakitError):
    status = 409
    title = "Conflict"


class Overloaded(VakitError):
    """Too much work right now; the client should retry after ``retry_after`` s."""

    status = 429
    title = "Too many requests"

    def __init__(self, message: str, retry_after: int = 1, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.retry_after = retry_after


class ShardUnavailable(VakitError):
    """A shard's database cannot be reached; nothing was written there."""

    status = 503
    title = "Shard unavailable"

    def __init__(self, message: str, shard: int, retry_after: int = 2, **fields: Any) -> None:
        super().__init__(message, shard=shard, **fields)
        self.shard = shard
        self.retry_after = retry_after


class CoordinationUnavailable(VakitError):
    """ZooKeeper could not be reached, or did not answer, in time."""

    status = 503
    title = "Coordination unavailable"
