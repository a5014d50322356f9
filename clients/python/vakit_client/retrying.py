"""When a request is sent again, and after how long: the part of the retry
loop both clients share (they differ only in how they sleep and send).

A request is sent again when the server says it did nothing and will take
it later (429, or 503 with ``Retry-After``), or when the answer was lost on
the way (a connection error) and sending it twice does no harm: it reads,
it is idempotent by its method, or it carries an ``Idempotency-Key`` (a
create), which is the same key on every attempt, so the server answers a
repeat with the first job. A 409 ``idempotency-key-in-flight`` is the
client's own earlier attempt still being served: waited out the same way.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

from vakit_client.errors import (
    IdempotencyKeyInFlight,
    ProblemError,
    TooManyRequests,
    TransportError,
    problem_error,
)

__all__ = ["Attempts", "Call", "RetryPolicy"]

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API operation, ready to send: what the sync and async clients
    both execute. ``repeatable``: sending it twice does no harm."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Sequence[tuple[str, str]] = ()
    json: Any = None
    idempotency_key: str | None = None
    repeatable: bool = False


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` sends after the first; waits of ``Retry-After`` when
    the server gives one (at most ``max_retry_after`` seconds: a longer one
    is raised to the caller), else ``backoff`` doubling to ``max_backoff``,
    with jitter so that many clients refused at once do not return at once."""

    max_retries: int = 4
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 60.0

    def backoff_for(self, retry: int) -> float:
        ceiling = min(self.max_backoff, self.backoff * 2.0**retry)
        return ceiling * random.uniform(0.5, 1.0)

    def start(self, call: Call[Any]) -> Attempts:
        return Attempts(self, call)


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After``: delay seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _safe_to_resend(call: Call[Any]) -> bool:
    return call.repeatable or call.idempotency_key is not None


class Attempts:
    """The attempts of one call: builds each request (the same key on every
    one) and says how long to wait before the next, or raises."""

    def __init__(self, policy: RetryPolicy, call: Call[Any]) -> None:
        self.policy = policy
        self.call = call
        self.retries = 0

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        headers = (
            {"Idempotency-Key": self.call.idempotency_key} if self.call.idempotency_key else {}
        )
        params: list[tuple[str, str | int | float | bool | None]] = list(self.call.params)
        return http.build_request(
            self.call.method,
            self.call.path,
            params=params or None,
            json=self.call.json,
            headers=headers,
        )

    def wait_or_raise(self, outcome: httpx.Response | httpx.TransportError) -> float:
        """The seconds to wait before sending again; raises the error the
        caller gets when there is no next attempt."""
        if isinstance(outcome, httpx.TransportError):
            error: Exception = TransportError(
                f"{self.call.method} {self.call.path}: {type(outcome).__name__}: {outcome}"
            )
            # A connection never made sent nothing; any other may have been served.
            resend = isinstance(outcome, httpx.ConnectError) or _safe_to_resend(self.call)
            wait = self.policy.backoff_for(self.retries) if resend else None
        else:
            problem = problem_error(
                outcome.status_code,
                outcome.content,
                retry_after_seconds(outcome.headers.get("Retry-After")),
            )
            error, wait = problem, self._wait_for(problem)
        if wait is None or self.retries >= self.policy.max_retries:
            raise error from (outcome if isinstance(outcome, Exception) else None)
        self.retries += 1
        return wait

    def _wait_for(self, problem: ProblemError) -> float | None:
        if isinstance(problem, IdempotencyKeyInFlight):
            return self.policy.backoff_for(self.retries)
        # A 429 is the limiter's, before any work; a 503 may come after a
        # write that committed (a statement timeout), so only a call that is
        # safe to send twice is sent again.
        refused = isinstance(problem, TooManyRequests) or (
            problem.status == 503 and _safe_to_resend(self.call)
        )
        if not refused:
            return None
        if problem.retry_after is None:
            return self.policy.backoff_for(self.retries)
        if problem.retry_after > self.policy.max_retry_after:
            return None
        return problem.retry_after
