"""The exceptions the client raises: one class per problem ``type`` the API
answers with (RFC 9457 ``application/problem+json``), so a caller catches
``NotFound`` or ``Conflict`` instead of comparing status codes.

The API's problem types are relative references, ``/problems/<slug>``; an
answer that is not a problem document (a proxy's 502 page) is a plain
:class:`ProblemError` with the type ``about:blank``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "PROBLEM_TYPES",
    "Conflict",
    "CoordinationUnavailable",
    "Forbidden",
    "IdempotencyKeyInFlight",
    "IdempotencyKeyReused",
    "InternalError",
    "InvalidRequest",
    "InvalidSignature",
    "MalformedJson",
    "MethodNotAllowed",
    "NotFound",
    "PartialResults",
    "PayloadTooLarge",
    "ProblemError",
    "ShardUnavailable",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "VakitClientError",
    "problem_error",
]


class VakitClientError(Exception):
    """Everything this package raises derives from it."""


class TransportError(VakitClientError):
    """No answer from the API (connection refused or reset, a timeout), after
    the retries the request was allowed."""


class InvalidSignature(VakitClientError):
    """A firing whose ``webhook-signature`` does not verify, or whose
    ``webhook-timestamp`` is missing or too far from now."""


class PartialResults(VakitClientError):
    """A search page the API could not complete: the shards it names did not
    answer. Pass ``allow_partial=True`` to take what the others had."""

    def __init__(self, missing_shards: list[int]) -> None:
        super().__init__(f"shards {missing_shards} did not answer; the results are incomplete")
        self.missing_shards = missing_shards


class ProblemError(VakitClientError):
    """An error answer. ``type`` is the problem's type (``/problems/not-found``),
    ``status`` the HTTP status, ``detail`` the server's explanation and
    ``body`` the whole problem document (its extension members: ``errors``,
    ``field``, ``shard``…)."""

    slug = ""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        type: str = "about:blank",
        title: str = "",
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {title or type}: {detail}")
        self.status = status
        self.detail = detail
        self.type = type
        self.title = title
        self.body: dict[str, Any] = dict(body or {})
        self.retry_after = retry_after


class MalformedJson(ProblemError):
    slug = "malformed-json"


class InvalidRequest(ProblemError):
    slug = "invalid-request"


class PayloadTooLarge(ProblemError):
    slug = "payload-too-large"


class Unauthorized(ProblemError):
    slug = "unauthorized"


class Forbidden(ProblemError):
    slug = "forbidden"


class NotFound(ProblemError):
    slug = "not-found"


class MethodNotAllowed(ProblemError):
    slug = "method-not-allowed"


class Conflict(ProblemError):
    slug = "conflict"


class IdempotencyKeyReused(ProblemError):
    """The key was used before with another request body (422)."""

    slug = "idempotency-key-reused"


class IdempotencyKeyInFlight(ProblemError):
    """A request with this key is still being served (409); the client
    retries it as it retries a 503."""

    slug = "idempotency-key-in-flight"


class TooManyRequests(ProblemError):
    slug = "too-many-requests"


class ShardUnavailable(ProblemError):
    slug = "shard-unavailable"


class CoordinationUnavailable(ProblemError):
    slug = "coordination-unavailable"


class InternalError(ProblemError):
    slug = "internal-error"


# By problem type, as the API writes it.
PROBLEM_TYPES: dict[str, type[ProblemError]] = {
    f"/problems/{cls.slug}": cls
    for cls in (
        MalformedJson, InvalidRequest, PayloadTooLarge, Unauthorized, Forbidden, NotFound,
        MethodNotAllowed, Conflict, IdempotencyKeyReused, IdempotencyKeyInFlight,
        TooManyRequests, ShardUnavailable, CoordinationUnavailable, InternalError,
    )
}  # fmt: skip


def _slug_of(problem_type: str) -> str:
    # An absolute type (the API behind a prefix, or resolved by a proxy)
    # still ends in /problems/<slug>.
    _, sep, slug = problem_type.rpartition("/problems/")
    return f"/problems/{slug}" if sep else problem_type


def problem_error(status: int, body: Any, retry_after: float | None = None) -> ProblemError:
    """The exception for one problem document (already decoded, or the raw
    text of an answer that is not one)."""
    if isinstance(body, bytes | str):
        try:
            body = json.loads(body)
        except ValueError:
            text = body.decode(errors="replace") if isinstance(body, bytes) else body
            return ProblemError(
                status, text.strip()[:500] or f"HTTP {status}", retry_after=retry_after
            )
    if not isinstance(body, Mapping) or not isinstance(body.get("type"), str):
        return ProblemError(status, f"HTTP {status}", body=None, retry_after=retry_after)
    problem_type = str(body["type"])
    cls = PROBLEM_TYPES.get(_slug_of(problem_type), ProblemError)
    return cls(
        int(body.get("status", status)),
        str(body.get("detail", "")),
        type=problem_type,
        title=str(body.get("title", "")),
        body=body,
        retry_after=retry_after,
    )
