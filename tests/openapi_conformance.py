"""Every response the API tests observe, checked against the API's own
OpenAPI document: its status is documented for that operation, its media
type is documented for that status, and its body validates against the
documented schema.

The API test clients install :func:`conformance_hooks` (``client_for`` in
``tests/integration/test_api.py``, ``serve`` in ``tests/unit/test_api_fast.py``),
so each test that talks to the API also checks that the document tells the
truth about what it saw; a response that does not conform fails the test
that received it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

__all__ = ["NotConforming", "OpenApiChecker", "conformance_hooks"]

_ROOT = "urn:vakit:openapi"
# Served outside the document on purpose: the document itself, its viewers,
# and /metrics (Prometheus' text format, for scrapers).
_UNDOCUMENTED = ("/openapi.json", "/docs", "/redoc", "/metrics")


class NotConforming(AssertionError):
    """A response the OpenAPI document does not describe."""


class OpenApiChecker:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        resource = Resource.from_contents(spec, default_specification=DRAFT202012)
        self.registry: Registry[Any] = Registry().with_resource(_ROOT, resource)
        self.paths = [(_pattern(p), p) for p in spec["paths"]]
        self.checked = 0
        self._validators: dict[str, Draft202012Validator] = {}

    def operation(self, method: str, path: str) -> tuple[str, dict[str, Any]] | None:
        # Literal paths win over templates (/api/v1/jobs:batch is not a job id).
        exact = self.spec["paths"].get(path)
        if exact is not None and method.lower() in exact:
            return path, exact[method.lower()]
        for pattern, template in self.paths:
            if pattern.match(path):
                op = self.spec["paths"][template].get(method.lower())
                if op is not None:
                    return template, op
        return None

    def check(self, method: str, path: str, status: int, content_type: str, body: bytes) -> None:
        if path.startswith(_UNDOCUMENTED):
            return
        found = self.operation(method, path)
        where = f"{method} {path} -> {status}"
        if found is None:
            # No route: the API's 404/405 must still be a documented problem.
            if status not in (404, 405) or not content_type.startswith("application/problem+json"):
                raise NotConforming(f"{where}: no operation in the document")
            self._validate(where, json.loads(body), "/components/schemas/Problem")
            self.checked += 1
            return
        template, op = found
        responses = op["responses"]
        key = str(status) if str(status) in responses else "default"
        if key not in responses:
            raise NotConforming(f"{where}: status not documented (has {sorted(responses)})")
        content = responses[key].get("content")
        media = content_type.split(";")[0].strip()
        if not content:
            if body:
                raise NotConforming(f"{where}: a body where the document has none")
            self.checked += 1
            return
        if media not in content:
            raise NotConforming(f"{where}: media type {media!r} not documented ({sorted(content)})")
        if media.endswith("json") and "schema" in content[media]:
            pointer = "/".join(
                ["/paths", _escape(template), method.lower(), "responses", key, "content", _escape(media), "schema"]
            )
            self._validate(where, json.loads(body), pointer)
        self.checked += 1

    def _validate(self, where: str, instance: Any, pointer: str) -> None:
        validator = self._validators.get(pointer)
        if validator is None:
            validator = Draft202012Validator({"$ref": f"{_ROOT}#{pointer}"}, registry=self.registry)
            self._validators[pointer] = validator
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
        if errors:
            first = errors[0]
            at = "/".join(str(p) for p in first.path)
            raise NotConforming(f"{where}: body does not match the document at {at!r}: {first.message[:300]}")


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", template)
    return re.compile(
        "^" + "".join("[^/]+" if part.startswith("{") else re.escape(part) for part in parts) + "$"
    )


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def conformance_hooks(
    spec_of: Callable[[], dict[str, Any]],
) -> dict[str, list[Callable[[httpx.Response], Awaitable[None]]]]:
    """``event_hooks`` for an ``httpx.AsyncClient`` on the API: each response
    is read and checked; one that does not conform raises in the test."""
    checker: OpenApiChecker | None = None

    async def check(response: httpx.Response) -> None:
        nonlocal checker
        if checker is None:
            checker = OpenApiChecker(spec_of())
        await response.aread()
        request = response.request
        checker.check(
            request.method,
            request.url.path,
            response.status_code,
            response.headers.get("content-type", ""),
            response.content,
        )

    return {"response": [check]}
