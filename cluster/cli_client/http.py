"""The HTTP API as the ``vakit`` command line sees it: one request at a time,
JSON in and out, problems turned into one exception.

The standard library's ``urllib`` is enough for a person's command: one
request, no pool, no event loop, and nothing more to install.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["ApiClient", "ApiError", "Unreachable"]


class ApiError(Exception):
    """The API answered with an error status; ``problem`` is its body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        detail = problem.get("detail") or problem.get("title") or "request failed"
        super().__init__(f"{status} {problem.get('title', '')}: {detail}".replace(" : ", ": "))


class Unreachable(Exception):
    """No answer from the API (refused, timed out, name not found)."""


@dataclass(frozen=True)
class ApiClient:
    base_url: str
    token: str | None = None
    timeout: float = 30.0
    acting_for: str | None = None  # an operator token's ?owner=

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
    ) -> Any:
        """The decoded JSON answer (None for an empty one); raises
        :class:`ApiError` for a 4xx/5xx and :class:`Unreachable` when no
        answer comes."""
        base = self.base_url.rstrip("/")
        # `vakit up` prints the API as http://host:port/api/v1: take either.
        base = base.removesuffix("/api/v1")
        url = base + path
        query: list[tuple[str, str]] = []
        params = dict(params or {})
        if self.acting_for:
            params["owner"] = self.acting_for
        for key, value in params.items():
            if value is None:
                continue
            # A repeated filter (status=FAILED&status=CANCELLED) is a list.
            for item in value if isinstance(value, list | tuple) else [value]:
                query.append((key, _text(item)))
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json, application/problem+json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                problem = json.loads(raw) if raw else {}
            except ValueError:
                problem = {"detail": raw.decode(errors="replace")[:200]}
            if not isinstance(problem, dict):
                problem = {"detail": str(problem)}
            raise ApiError(exc.code, problem) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unreachable(f"cannot reach the API at {self.base_url}: {reason}") from None
        return json.loads(raw) if raw else None


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
