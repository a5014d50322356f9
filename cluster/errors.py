"""The one error hierarchy of Vakit.

Store and target errors are translated once, at the seam, into these classes.
They say what went wrong in domain terms and carry structured fields
(``shard``, ``job_id``, ``idempotency_key``…); they know nothing of HTTP. The
API maps each class to a status, a title and a problem type in one table
(:mod:`cluster.api.problems`).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Conflict",
    "CoordinationUnavailable",
    "Forbidden",
    "IdempotencyKeyExpired",
    "IdempotencyKeyInFlight",
    "IdempotencyKeyReused",
    "InvalidRequest",
    "NotFound",
    "Overloaded",
    "PayloadTooLarge",
    "ShardUnavailable",
    "SlotMoving",
    "StoreError",
    "Unauthorized",
    "VakitError",
]


class VakitError(Exception):
    """Base class: a message a person can act on, and structured fields."""

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
    """Input that can never be accepted as it is; nothing was changed."""


class PayloadTooLarge(InvalidRequest):
    """A request or a payload over the configured size limit."""

    def __init__(
        self, message: str, size: int | None = None, limit: int | None = None, **fields: Any
    ) -> None:
        super().__init__(message, **fields)
        self.size = size
        self.limit = limit


class Unauthorized(VakitError):
    """No credentials, or credentials nobody issued."""


class Forbidden(VakitError):
    """Valid credentials that do not allow this (a tenant token on an
    operator-only view, or acting for another owner)."""


class NotFound(VakitError):
    """No such resource for this owner (other owners' resources included)."""


class Conflict(VakitError):
    """The resource's state or an earlier request forbids this one."""


class IdempotencyKeyReused(Conflict):
    """An ``Idempotency-Key`` sent again with another request body: the key
    names a different request, nothing was changed."""


class IdempotencyKeyExpired(Conflict):
    """An ``Idempotency-Key`` whose job this shard no longer holds: its
    history expired, or (after a move of its slot) stayed on the shard that
    ran it. ``job_id`` is the job the key names."""

    def __init__(self, message: str, job_id: Any, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.job_id = job_id


class IdempotencyKeyInFlight(Conflict):
    """An ``Idempotency-Key`` whose first request is still being served."""


class Overloaded(VakitError):
    """Too much work right now; the client should retry after ``retry_after`` s."""

    def __init__(self, message: str, retry_after: int = 1, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.retry_after = retry_after


class ShardUnavailable(VakitError):
    """A shard's database cannot be reached, or did not answer in time.

    ``maybe_written`` is False when the request never reached the shard
    (no connection could be had): nothing was written. It is True when the
    link failed after a statement was sent: a write may have committed, so
    the same write must not be redone elsewhere (it would happen twice)."""

    def __init__(
        self,
        message: str,
        shard: int,
        retry_after: int = 2,
        *,
        maybe_written: bool = False,
        **fields: Any,
    ) -> None:
        super().__init__(message, shard=shard, **fields)
        self.shard = shard
        self.retry_after = retry_after
        self.maybe_written = maybe_written


class SlotMoving(VakitError):
    """A write for a slot this shard does not serve now: the slot is being
    moved off it, or has been (``slot_fences``, issue 42). The shard refused
    it inside the write's own transaction, so nothing was written; the
    slot is served by its new owner, or by nobody for a moment. Retry
    after ``retry_after`` seconds (routed by a newer slot map).

    Deliberately not a :class:`ShardUnavailable`: a create must not fail
    over to another shard, since a slot is served by one shard or by none.

    A batch of the worker's writes (heartbeats, completions) is written for
    every job it can: ``written`` holds the ids that were, ``refused`` the
    ids of fenced slots that were not (both empty for a single write)."""

    def __init__(
        self,
        shard: int,
        slot: int,
        *,
        retry_after: int = 1,
        written: frozenset[Any] = frozenset(),
        refused: frozenset[Any] = frozenset(),
    ) -> None:
        super().__init__(
            f"slot {slot} is moving between shards; retry in {retry_after} s",
            shard=shard,
            slot=slot,
        )
        self.shard = shard
        self.slot = slot
        self.retry_after = retry_after
        self.written = written
        self.refused = refused


class CoordinationUnavailable(VakitError):
    """ZooKeeper could not be reached, or did not answer, in time."""


class StoreError(VakitError):
    """A database error that is neither an unavailable shard nor a conflict
    (a bug, a schema that does not match): translated at the store seam so
    no driver exception reaches the worker or the API."""

    def __init__(
        self, message: str, shard: int, sqlstate: str | None = None, **fields: Any
    ) -> None:
        super().__init__(message, shard=shard, sqlstate=sqlstate, **fields)
        self.shard = shard
        self.sqlstate = sqlstate
