"""The OpenAPI document as the API really behaves.

FastAPI's own document describes every error as a 422 ``HTTPValidationError``
in ``application/json``, shows the bearer token as a header parameter, and
names operations after their paths. This module rewrites it once, when the
document is first asked for:

- a ``bearerAuth`` security scheme on every route that takes a token (the
  ``authorization`` header parameter FastAPI derived from the dependency is
  removed), with its 401 and 403;
- ``application/problem+json`` responses with the :data:`Problem` schema,
  whose ``type`` is one of the stable URIs of :data:`~.problems.KINDS`: the
  ones every ``/api/`` route can answer (422: an unknown query parameter, if
  nothing else; 400 and 413 where a body is read, 404 where the path names a
  resource, 429, 503, 500),
  and the ones a route declares with :func:`problem_responses`;
- readable operation ids (:func:`operation_id`, from the handler's name).

A new route documents its own problems with one argument::

    @router.post("/api/v1/jobs/{job_id}:retry", responses=problem_responses(409))
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from cluster.api.openapi_exact import exact_document
from cluster.api.problems import KINDS, PROBLEM, ProblemKind

__all__ = ["install_openapi", "operation_id", "problem_responses"]

_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_STATUS_TEXT = {
    400: "The body is not JSON, or not strict JSON (NaN, Infinity, a NUL byte, not UTF-8).",
    401: "No token, or a token nobody issued.",
    403: "The token may not do this (a tenant acting for another owner, an operator-only view).",
    404: "No such resource for this owner (another owner's resources included).",
    409: "The resource's state, or a request still in flight, forbids this one.",
    413: "The request body or the payload is over the configured limit.",
    422: "The request can never be accepted as it is; nothing was changed.",
    429: "Too many requests for this owner or this API process; see Retry-After.",
    500: "An unexpected error; it has been logged, without the request's data.",
    503: "A shard or ZooKeeper cannot be reached; nothing was written; see Retry-After.",
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again.",
        "schema": {"type": "integer", "minimum": 0},
    }
}
IDEMPOTENCY_KEY_HELP = (
    "Makes the create safe to repeat (draft-ietf-httpapi-idempotency-key-header). A repeat "
    "with the same body returns the first job (200, with `Idempotent-Replayed: true`); the "
    "same key with another body is a 422 (`/problems/idempotency-key-reused`); a repeat while "
    "the first request with the key is still being served is a 409 "
    "(`/problems/idempotency-key-in-flight`). Keys are per owner, 1 to 200 characters, and "
    "live as long as their job: while it is pending, and until its history is dropped "
    "(`VAKIT_HISTORY_RETENTION_DAYS` after it finished, 30 days by default)."
)


def _kinds(status: int) -> list[ProblemKind]:
    return [k for k in KINDS.values() if k.status == status]


def _response(status: int) -> dict[str, Any]:
    kinds = _kinds(status)
    types = ", ".join(f"`{k.type}`" for k in kinds)
    schema: dict[str, Any] = {
        "allOf": [_PROBLEM_REF, {"properties": {"type": {"enum": [k.type for k in kinds]}}}]
    }
    out: dict[str, Any] = {
        "description": f"{_STATUS_TEXT.get(status, 'A problem.')} Problem types: {types}.",
        "content": {PROBLEM: {"schema": schema}},
    }
    if status in (429, 503):
        out["headers"] = _RETRY_AFTER
    return out


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses=`` for the problems it may answer beyond those
    every ``/api/`` route may (see the module's docstring): each status with
    the problem types of that status."""
    unknown = [s for s in statuses if not _kinds(s)]
    if unknown:
        raise ValueError(f"no problem kind has status {unknown}: add it to problems.KINDS")
    return {s: _response(s) for s in statuses}


def operation_id(route: APIRoute) -> str:
    """``createJob`` for a handler named ``create_job``."""
    head, *rest = route.name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (and ``/openapi.json``) the honest document."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            app.openapi_schema = _rewrite(spec)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


# OpenAPI links: what a created resource's id can be used for next. They
# document the API's flow for people and SDKs, and let a stateful client
# (the fuzz test's schemathesis) chain a create with what follows.
_LINKS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    # operation: (status, path parameter, response field, operations it feeds)
    "createJob": (
        "201", "job_id", "jobId",
        ("getJob", "patchJob", "deleteJob", "retryJob", "pauseJob", "resumeJob"),
    ),
    "createCron": (
        "201", "cron_job_id", "cronJobId",
        ("getCron", "patchCron", "deleteCron", "triggerCron", "previewCron", "cronRuns",
         "pauseCron", "resumeCron", "backfillCron"),
    ),
    "createCalendar": (
        "201", "name", "name", ("getCalendar", "replaceCalendar", "deleteCalendar"),
    ),
}  # fmt: skip


def _add_links(spec: dict[str, Any]) -> None:
    ids = {op.get("operationId") for ops in spec.get("paths", {}).values() for op in ops.values()}
    for ops in spec.get("paths", {}).values():
        for op in ops.values():
            link = _LINKS.get(op.get("operationId", ""))
            if link is None:
                continue
            status, param, field, targets = link
            response = op.get("responses", {}).get(status)
            if response is None:
                continue
            response["links"] = {
                target: {"operationId": target, "parameters": {param: f"$response.body#/{field}"}}
                for target in targets
                if target in ids
            }


def _rewrite(spec: dict[str, Any]) -> dict[str, Any]:
    components = spec.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["Problem"] = _problem_schema()
    components["securitySchemes"] = {
        "bearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "description": "A token from VAKIT_API_TOKENS; it stands for an owner service "
            "(a tenant) or an operator.",
        }
    }
    for path, operations in spec.get("paths", {}).items():
        for operation in operations.values():
            _rewrite_operation(path, operation)
    _add_links(spec)
    exact_document(spec)
    return spec


def _rewrite_operation(path: str, op: dict[str, Any]) -> None:
    params = op.get("parameters", [])
    authenticated = any(
        p["in"] == "header" and p["name"].lower() == "authorization" for p in params
    )
    params = [
        p for p in params if not (p["in"] == "header" and p["name"].lower() == "authorization")
    ]
    for p in params:
        if p["in"] == "header" and p["name"].lower() == "idempotency-key":
            p["description"] = IDEMPOTENCY_KEY_HELP
            p["schema"] = {"type": "string", "minLength": 1, "maxLength": 200}
    if params:
        op["parameters"] = params
    else:
        op.pop("parameters", None)
    responses: dict[str, Any] = op.setdefault("responses", {})
    default_422 = responses.get("422", {})
    if "HTTPValidationError" in str(default_422):
        del responses["422"]
    if "200" in responses and op.get("operationId") == "createJob":
        responses["200"]["headers"] = {
            "Idempotent-Replayed": {
                "description": "`true`: this answers a repeat of an earlier request with "
                "the same Idempotency-Key; nothing was created.",
                "schema": {"type": "string", "enum": ["true"]},
            }
        }
    statuses: set[int] = set()
    if authenticated:
        op["security"] = [{"bearerAuth": []}]
        statuses |= {401, 403}
    if path.startswith("/api/"):
        statuses |= {429, 500, 503}
        if "{" in path:
            statuses.add(404)
        if "requestBody" in op:
            statuses |= {400, 413}
        # Every /api/ operation refuses a query parameter it does not declare.
        statuses.add(422)
    for status in sorted(statuses):
        responses.setdefault(str(status), _response(status))


def _problem_schema() -> dict[str, Any]:
    return {
        "title": "Problem",
        "description": "An `application/problem+json` body (RFC 9457). `type` is a relative "
        "URI, one per kind of error, that the API serves as the kind's page. Extension "
        "members may follow: `field` (the input at fault), `errors` (one per invalid field), "
        "`shard`, `idempotency_key`, `limit`, `size`, `retryAfter`...",
        "type": "object",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {
                "type": "string",
                "format": "uri-reference",
                "enum": [k.type for k in KINDS.values()],
            },
            "title": {"type": "string"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": {"type": "string"},
            "field": {"type": "string"},
            "errors": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
                },
            },
        },
        "additionalProperties": True,
    }
