"""Errors as HTTP: the one table from domain errors to ``application/problem+json``.

Domain errors (:mod:`cluster.errors`) know nothing of HTTP. This module is the
only place that gives each class a status, a title and a problem ``type``
(RFC 9457), and it builds every problem body the API sends: from an exception
handler, from the request-accounting middleware, and for each failed job of a
batch.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from cluster.errors import (
    Conflict,
    CoordinationUnavailable,
    Forbidden,
    InvalidRequest,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    ShardUnavailable,
    StoreError,
    Unauthorized,
    VakitError,
)

__all__ = [
    "PROBLEM",
    "PROBLEMS",
    "ProblemKind",
    "install_handlers",
    "kind_of",
    "problem_body",
    "problem_for",
    "problem_response",
    "validation_problem",
]

log = logging.getLogger(__name__)
PROBLEM = "application/problem+json"


@dataclass(frozen=True)
class ProblemKind:
    status: int
    title: str
    type: str = "about:blank"
    # Internal errors answer with a generic detail and no fields: what went
    # wrong is logged, not shown to the client.
    internal: bool = False


# The one table. Lookup walks the exception's MRO, so the most specific class
# wins: PayloadTooLarge (413) before InvalidRequest (422), and
# cluster.cron.schedule.InvalidSchedule, an InvalidRequest, is a 422.
PROBLEMS: dict[type[VakitError], ProblemKind] = {
    PayloadTooLarge: ProblemKind(413, "Payload too large"),
    InvalidRequest: ProblemKind(422, "Invalid request"),
    Unauthorized: ProblemKind(401, "Unauthorized"),
    Forbidden: ProblemKind(403, "Forbidden"),
    NotFound: ProblemKind(404, "Not found"),
    Conflict: ProblemKind(409, "Conflict"),
    Overloaded: ProblemKind(429, "Too many requests"),
    ShardUnavailable: ProblemKind(503, "Shard unavailable"),
    CoordinationUnavailable: ProblemKind(503, "Coordination unavailable"),
    StoreError: ProblemKind(500, "Internal error", internal=True),
    VakitError: ProblemKind(500, "Internal error", internal=True),
}
_INTERNAL_DETAIL = "an unexpected error occurred; it has been logged"
_by_class: dict[type[BaseException], ProblemKind] = {}


def kind_of(exc: BaseException) -> ProblemKind:
    """The table's entry for ``exc``: its most specific class in the table."""
    cls = type(exc)
    kind = _by_class.get(cls)
    if kind is None:
        kind = next(
            (PROBLEMS[c] for c in cls.__mro__ if c in PROBLEMS),
            ProblemKind(500, "Internal error", internal=True),
        )
        _by_class[cls] = kind
    return kind


def problem_body(
    status: int, title: str, detail: str, type_: str = "about:blank", **fields: Any
) -> dict[str, Any]:
    # Extension members never override the standard ones (RFC 9457).
    return {**fields, "type": type_, "title": title, "status": status, "detail": detail}


def problem_for(exc: BaseException, *, where: str = "") -> tuple[dict[str, Any], dict[str, str]]:
    """The problem body and extra headers for ``exc``, logging what needs it.

    ``where`` names the request (its path) in the log."""
    kind = kind_of(exc)
    headers: dict[str, str] = {}
    if kind.internal or not isinstance(exc, VakitError):
        log.error("internal error: %s", exc, exc_info=exc, extra={"path": where})
        return problem_body(kind.status, kind.title, _INTERNAL_DETAIL, kind.type), headers
    if isinstance(exc, ShardUnavailable):
        headers["Retry-After"] = str(exc.retry_after)
        log.warning("shard unavailable", extra={"shard": exc.shard, "path": where})
    elif isinstance(exc, Overloaded):
        headers["Retry-After"] = str(exc.retry_after)
    elif isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    return problem_body(kind.status, kind.title, exc.message, kind.type, **exc.fields), headers


def problem_response(body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str)
    return Response(content, status_code=body["status"], media_type=PROBLEM, headers=headers)


def validation_problem(errors: list[Any]) -> dict[str, Any]:
    """A 422 (or 400 for JSON that does not parse) from pydantic's errors."""
    fields = [
        {
            "field": ".".join(str(p) for p in e.get("loc", ()) if p != "body"),
            "message": e.get("msg", ""),
        }
        for e in errors
    ]
    if any(e.get("type") == "json_invalid" for e in errors):
        return problem_body(400, "Malformed JSON", "the request body is not valid JSON", errors=fields)
    first = fields[0] if fields else {"field": "", "message": "invalid request"}
    detail = f"{first['field']}: {first['message']}" if first["field"] else first["message"]
    return problem_body(422, "Invalid request", detail, errors=fields)


def install_handlers(app: FastAPI) -> None:
    """Every error leaves the API as a problem+json body."""

    async def vakit_error(request: Request, exc: Exception) -> Response:
        return problem_response(*problem_for(exc, where=request.url.path))

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError | ValidationError)
        return problem_response(validation_problem(list(exc.errors())))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return problem_response(problem_body(exc.status_code, str(exc.detail), str(exc.detail)))

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error", exc_info=exc, extra={"path": request.url.path})
        return problem_response(problem_body(500, "Internal error", _INTERNAL_DETAIL))

    app.add_exception_handler(VakitError, vakit_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
