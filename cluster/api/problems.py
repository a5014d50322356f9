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
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Match

from cluster.api.calendar_schemas import CALENDAR_DAY
from cluster.api.strictjson import StrictJsonError
from cluster.errors import (
    Conflict,
    CoordinationUnavailable,
    Forbidden,
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    InvalidRequest,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    ShardUnavailable,
    SlotMoving,
    StoreError,
    Unauthorized,
    VakitError,
)
from cluster.instants import INSTANT_PATTERN

__all__ = [
    "KINDS",
    "PROBLEM",
    "PROBLEMS",
    "ProblemKind",
    "install_handlers",
    "kind_of",
    "log_internal",
    "pages",
    "problem_body",
    "problem_for",
    "problem_response",
    "problem_type",
    "strict_json_problem",
    "validation_problem",
]

log = logging.getLogger(__name__)
PROBLEM = "application/problem+json"


@dataclass(frozen=True)
class ProblemKind:
    """One kind of error as clients see it: its status, its title and its
    problem ``type``, ``/problems/<slug>`` (see :func:`problem_type`)."""

    status: int
    title: str
    slug: str
    # Internal errors answer with a generic detail and no fields: what went
    # wrong is logged, not shown to the client.
    internal: bool = False

    @property
    def type(self) -> str:
        return problem_type(self.slug)


def problem_type(slug: str) -> str:
    """The problem ``type`` of a kind: a relative reference, ``/problems/<slug>``.

    Vakit is deployed under each operator's own host names, so an absolute
    URI would need a domain the project keeps forever; a relative reference
    resolves against the API that sent the problem (RFC 9457, 3.1.1), which
    serves the kind's page there (``GET /problems/<slug>``, from
    ``docs/problems/<slug>.md``). The slugs are part of the API: they never
    change, new kinds get new ones."""
    return f"/problems/{slug}"


MALFORMED_JSON = ProblemKind(400, "Malformed JSON", "malformed-json")
INVALID_REQUEST = ProblemKind(422, "Invalid request", "invalid-request")
PAYLOAD_TOO_LARGE = ProblemKind(413, "Payload too large", "payload-too-large")
UNAUTHORIZED = ProblemKind(401, "Unauthorized", "unauthorized")
FORBIDDEN = ProblemKind(403, "Forbidden", "forbidden")
NOT_FOUND = ProblemKind(404, "Not found", "not-found")
METHOD_NOT_ALLOWED = ProblemKind(405, "Method not allowed", "method-not-allowed")
CONFLICT = ProblemKind(409, "Conflict", "conflict")
KEY_REUSED = ProblemKind(422, "Idempotency-Key reused", "idempotency-key-reused")
KEY_IN_FLIGHT = ProblemKind(409, "Idempotency-Key in flight", "idempotency-key-in-flight")
TOO_MANY_REQUESTS = ProblemKind(429, "Too many requests", "too-many-requests")
SHARD_UNAVAILABLE = ProblemKind(503, "Shard unavailable", "shard-unavailable")
COORDINATION_UNAVAILABLE = ProblemKind(503, "Coordination unavailable", "coordination-unavailable")
INTERNAL = ProblemKind(500, "Internal error", "internal-error", internal=True)

# The one table. Lookup walks the exception's MRO, so the most specific class
# wins: PayloadTooLarge (413) before InvalidRequest (422), IdempotencyKeyReused
# (422, as the Idempotency-Key draft asks) before Conflict (409), and
# cluster.cron.schedule.InvalidSchedule, an InvalidRequest, is a 422.
PROBLEMS: dict[type[VakitError], ProblemKind] = {
    PayloadTooLarge: PAYLOAD_TOO_LARGE,
    InvalidRequest: INVALID_REQUEST,
    Unauthorized: UNAUTHORIZED,
    Forbidden: FORBIDDEN,
    NotFound: NOT_FOUND,
    IdempotencyKeyReused: KEY_REUSED,
    IdempotencyKeyInFlight: KEY_IN_FLIGHT,
    Conflict: CONFLICT,
    Overloaded: TOO_MANY_REQUESTS,
    ShardUnavailable: SHARD_UNAVAILABLE,
    # A slot moving between shards: for the client, this shard cannot take
    # the write for a second (the body names the slot).
    SlotMoving: SHARD_UNAVAILABLE,
    CoordinationUnavailable: COORDINATION_UNAVAILABLE,
    StoreError: INTERNAL,
    VakitError: INTERNAL,
}
# Every kind the API can answer with, by slug: the OpenAPI document lists
# them, and each has its page in docs/problems/.
KINDS: dict[str, ProblemKind] = {
    k.slug: k
    for k in (
        MALFORMED_JSON, INVALID_REQUEST, PAYLOAD_TOO_LARGE, UNAUTHORIZED, FORBIDDEN, NOT_FOUND,
        METHOD_NOT_ALLOWED, CONFLICT, KEY_REUSED, KEY_IN_FLIGHT, TOO_MANY_REQUESTS,
        SHARD_UNAVAILABLE, COORDINATION_UNAVAILABLE, INTERNAL,
    )
}  # fmt: skip
_BY_STATUS = {
    403: FORBIDDEN,
    404: NOT_FOUND,
    405: METHOD_NOT_ALLOWED,
    413: PAYLOAD_TOO_LARGE,
    400: MALFORMED_JSON,
}
_INTERNAL_DETAIL = "an unexpected error occurred; it has been logged"
_by_class: dict[type[BaseException], ProblemKind] = {}


def kind_of(exc: BaseException) -> ProblemKind:
    """The table's entry for ``exc``: its most specific class in the table."""
    cls = type(exc)
    kind = _by_class.get(cls)
    if kind is None:
        kind = next((PROBLEMS[c] for c in cls.__mro__ if c in PROBLEMS), INTERNAL)
        _by_class[cls] = kind
    return kind


def problem_body(kind: ProblemKind, detail: str, **fields: Any) -> dict[str, Any]:
    # Extension members never override the standard ones (RFC 9457).
    return {
        **fields,
        "type": kind.type,
        "title": kind.title,
        "status": kind.status,
        "detail": detail,
    }


def problem_for(exc: BaseException, *, where: str = "") -> tuple[dict[str, Any], dict[str, str]]:
    """The problem body and extra headers for ``exc``, logging what needs it.

    ``where`` names the request (its path) in the log."""
    kind = kind_of(exc)
    headers: dict[str, str] = {}
    if kind.internal or not isinstance(exc, VakitError):
        log_internal(exc, where)
        return problem_body(INTERNAL, _INTERNAL_DETAIL), headers
    if isinstance(exc, ShardUnavailable):
        headers["Retry-After"] = str(exc.retry_after)
        log.warning("shard unavailable", extra={"shard": exc.shard, "path": where})
    elif isinstance(exc, (Overloaded, SlotMoving)):
        headers["Retry-After"] = str(exc.retry_after)
    elif isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    return problem_body(kind, exc.message, **exc.fields), headers


def log_internal(exc: BaseException, where: str) -> None:
    """Log an unexpected error without a byte of the request in it.

    An exception's message may quote what it choked on (PostgreSQL quotes
    the JSON it refused, an encoder the string), and that is a tenant's
    payload: the line carries the classes, the structured fields a
    :class:`VakitError` names (shard, sqlstate) and the frames of the
    traceback, never a message."""
    chain: list[str] = []
    frames: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 5:
        chain.append(f"{type(seen).__module__}.{type(seen).__qualname__}")
        frames.extend(
            f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_tb(seen.__traceback__)
        )
        seen = seen.__cause__ or seen.__context__
    fields = exc.fields if isinstance(exc, VakitError) else {}
    safe = {k: v for k, v in fields.items() if k in ("shard", "sqlstate", "constraint")}
    log.error(
        "internal error: %s",
        " <- ".join(chain),
        extra={"path": where, "frames": frames[-30:], **safe},
    )


def problem_response(body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str)
    return Response(content, status_code=body["status"], media_type=PROBLEM, headers=headers)


# What a pattern the document publishes means, instead of pydantic's
# "String should match pattern '<the pattern>'".
_PATTERN_MEANS = {
    INSTANT_PATTERN: "must be an RFC 3339 timestamp with a T and an offset, from "
    "1970-01-01T00:00:00Z and before 9000-01-01T00:00:00Z, e.g. 2026-10-23T14:30:00Z",
    CALENDAR_DAY: "is not an ISO date (YYYY-MM-DD) or is outside the years 1900-2200",
}


def _message(error: Any) -> str:
    if error.get("type") == "string_pattern_mismatch":
        means = _PATTERN_MEANS.get((error.get("ctx") or {}).get("pattern", ""))
        if means is not None:
            return means
    return str(error.get("msg", ""))


def validation_problem(errors: list[Any]) -> dict[str, Any]:
    """A 422 (or 400 for JSON that does not parse) from pydantic's errors.

    Only pydantic's location and message are kept: its ``input`` (the value
    refused, a tenant's data) never leaves, in the answer or in a log."""
    fields = [
        {
            "field": ".".join(str(p) for p in e.get("loc", ()) if p != "body"),
            "message": _message(e),
        }
        for e in errors
    ]
    if any(e.get("type") == "json_invalid" for e in errors):
        return problem_body(MALFORMED_JSON, "the request body is not valid JSON", errors=fields)
    first = fields[0] if fields else {"field": "", "message": "invalid request"}
    detail = f"{first['field']}: {first['message']}" if first["field"] else first["message"]
    return problem_body(INVALID_REQUEST, detail, errors=fields)


def strict_json_problem(exc: StrictJsonError) -> dict[str, Any]:
    """A body or query string that breaks the strict JSON rules: 400 when it
    is not JSON at all, 422 when it is but cannot be stored."""
    if exc.malformed:
        return problem_body(MALFORMED_JSON, exc.message)
    fields = {"field": exc.field} if exc.field else {}
    detail = f"{exc.field}: {exc.message}" if exc.field else exc.message
    return problem_body(INVALID_REQUEST, detail, **fields)


_PAGES = Path(__file__).resolve().parents[2] / "docs" / "problems"

pages = APIRouter(tags=["problems"])


@pages.get(
    "/problems/{slug}",
    response_class=PlainTextResponse,
    responses={
        200: {"content": {"text/markdown": {"schema": {"type": "string"}}}},
        404: {
            "description": "No such problem type.",
            "content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        },
    },
)
async def get_problem_type(slug: str) -> Response:
    """The page of a problem ``type``: what it means and what to do about it
    (``docs/problems/<slug>.md``)."""
    kind = KINDS.get(slug)
    if kind is None:
        raise NotFound("no such problem type", slug=slug[:64])
    page = _PAGES / f"{slug}.md"
    try:
        text = page.read_text(encoding="utf-8")
    except OSError:
        # An installed package has no docs/ beside it: the table's own words.
        text = f"# {kind.title}\n\nHTTP status {kind.status}. See docs/problems/{slug}.md.\n"
    return PlainTextResponse(text, media_type="text/markdown; charset=utf-8")


_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed_methods(request: Request) -> str:
    """The ``Allow`` of a 405: every method some route serves at this path,
    as the OpenAPI document lists the path's operations (and HEAD with GET).
    Each method is asked of the router as it would route it: routes may be
    nested (included routers), and only a 405 pays for it."""
    allowed = []
    for method in _METHOD_ORDER:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return ", ".join(allowed)


def install_handlers(app: FastAPI) -> None:
    """Every error leaves the API as a problem+json body."""

    async def vakit_error(request: Request, exc: Exception) -> Response:
        return problem_response(*problem_for(exc, where=request.url.path))

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError | ValidationError)
        return problem_response(validation_problem(list(exc.errors())))

    async def http_error(request: Request, exc: Exception) -> Response:
        # Starlette's own: no route (404), a method the route has not (405),
        # a body FastAPI could not read (400).
        assert isinstance(exc, StarletteHTTPException)
        kind = _BY_STATUS.get(exc.status_code, INVALID_REQUEST)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names the methods of the first route whose path
            # matched; a path is served by one route per method.
            headers["Allow"] = _allowed_methods(request)
        return problem_response(problem_body(kind, str(exc.detail)), headers)

    async def unexpected(request: Request, exc: Exception) -> Response:
        log_internal(exc, request.url.path)
        return problem_response(problem_body(INTERNAL, _INTERNAL_DETAIL))

    app.add_exception_handler(VakitError, vakit_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
