"""The HTTP target: POST a JSON firing to the job's URL.

2xx is success; 408, 429, 5xx, timeouts and connection errors are retried;
any other status (redirects included: they are not followed) fails at once,
since repeating the same request would get the same answer.

SSRF guard: the URL is parsed once by the policy (with yarl) and that parsed
URL is what the request goes to; the client
(:mod:`cluster.targets.httpclient`) checks the address of every socket
before it connects, literals and resolved names alike. Redirects are never
followed, and no proxy is used, so the checked address is the one connected
to.

A firing is written as one HTTP/1.1 message: the request line and Host
header are made once per URL (:class:`_Route`), the rest per firing as one
string. At a round hour a worker makes 50,000 of them in a few seconds.
"""

from __future__ import annotations

import asyncio
import email.utils
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from yarl import URL

from cluster import tracing
from cluster.instants import format_instant
from cluster.model import ClaimedJob
from cluster.targets import FireResult, firing_body, idempotency_key
from cluster.targets.httpclient import HttpClient, HttpClientError, Origin
from cluster.targets.policy import AddressPolicy, AddressRefused, TargetRefused
from cluster.targets.scope import TargetScope
from cluster.targets.signing import Signer

__all__ = ["HttpTarget", "retry_after"]

_RETRY_STATUSES = frozenset({408, 429})
_CRLF = "\r\n"
_USER_AGENT_LINE = "User-Agent: vakit-worker/0.1\r\n"
# A header name (RFC 9110 token); the create-time check is stricter.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def retry_after(value: str | None) -> float | None:
    """A Retry-After header's seconds (delay-seconds or an HTTP date), at
    most an hour; None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return min(float(text), 3600.0)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, min((when - datetime.now(UTC)).total_seconds(), 3600.0))


class _Route:
    """A checked URL as the client sends to it: its origin and the request
    line and Host header every firing to it starts with."""

    __slots__ = ("head", "origin")

    def __init__(self, url: URL) -> None:
        scheme = url.scheme
        host = url.raw_host or ""
        port = url.port or (443 if scheme == "https" else 80)
        self.origin: Origin = (scheme, host, port)
        shown = f"[{host}]" if ":" in host else host
        if port != (443 if scheme == "https" else 80):
            shown = f"{shown}:{port}"
        self.head = (
            f"POST {url.raw_path_qs or '/'} HTTP/1.1\r\nHost: {shown}\r\n"
            "Content-Type: application/json\r\n"
        )


class HttpTarget:
    kind = "HTTP"
    enforces_timeout = True  # the client's deadline bounds the request

    def __init__(
        self,
        policy: AddressPolicy,
        pool_size: int = 200,
        *,
        scope: TargetScope | None = None,
        signer: Signer | None = None,
    ) -> None:
        self._policy = policy
        self._scope = scope or TargetScope()
        self._signer = signer or Signer()
        self._pool_size = pool_size
        self._client: HttpClient | None = None
        # The policy and the grants never change: a URL is checked once per
        # owner, not per firing (parsing it and its address was 4 % of a
        # worker's CPU in an HTTP wave). Bounded, whatever the URLs.
        self._checked: dict[tuple[str | None, str], _Route | TargetRefused] = {}
        self._formatted: tuple[datetime | None, str] = (None, "")

    def _route(self, owner: str | None, url: str) -> _Route | TargetRefused:
        """The URL as parsed (once) by the policy, or why it is refused."""
        key = (owner, url)
        route = self._checked.get(key)
        if route is None:
            if len(self._checked) >= 10_000:
                self._checked.clear()
            try:
                parsed = self._policy.parse(url)
                if owner is not None:
                    self._scope.check_http(owner, parsed)
                route = _Route(parsed)
            except TargetRefused as exc:
                route = exc
            self._checked[key] = route
        return route

    def _custom_lines(self, custom: Mapping[str, str]) -> list[str]:
        """The job's own headers as header lines, checked again (the deny
        list may have grown since the create): :class:`TargetRefused` for
        one it may not set."""
        self._scope.check_headers(custom)
        lines = []
        for name, value in custom.items():
            if not _TOKEN.fullmatch(name) or "\r" in value or "\n" in value:
                raise TargetRefused(f"header {name!r} is not a valid header", "target.headers")
            lines.append(f"{name}: {value}\r\n")
        return lines

    def _request(
        self, job: ClaimedJob, job_id: str, route: _Route, custom: list[str] | None
    ) -> bytes:
        """The firing as one HTTP/1.1 message."""
        owner = job.owner
        when = job.scheduled_for
        if when == self._formatted[0]:
            scheduled_for = self._formatted[1]
        else:
            scheduled_for = format_instant(when)
            # A wave's firings share their instant: formatted once.
            self._formatted = (when, scheduled_for)
        body = firing_body(job, job_id, scheduled_for)
        key = idempotency_key(job, job_id, scheduled_for)
        own = (
            f"{route.head}Idempotency-Key: {key}\r\nVakit-Job-Id: {job_id}\r\n"
            f"Vakit-Scheduled-For: {scheduled_for}\r\nVakit-Attempt: {job.attempt}\r\n"
            f"{f'Vakit-Owner: {owner}{_CRLF}' if owner is not None else ''}"
            f"{self._signer.header_lines(owner, key, body)}"
        )
        # The firing span's trace context (the job's create trace continued),
        # or, with tracing off here, the one stored at create, passed on.
        if tracing.ENABLED or "traceparent" in job.target:
            traced: dict[str, str] = {}
            tracing.inject(traced, job.target.get("traceparent"))
            own += "".join(f"{name}: {value}\r\n" for name, value in traced.items())
        extra = _USER_AGENT_LINE
        if custom:
            # Case-insensitively: the job's "vakit-job-id" cannot ride along
            # beside ours, and its User-Agent replaces ours.
            ours = own.lower()
            extra = "".join(
                line for line in custom
                if f"\n{line.split(':', 1)[0].lower()}:" not in ours
            )  # fmt: skip
            if "\nuser-agent:" not in "\n" + extra.lower():
                extra += _USER_AGENT_LINE
        return f"{own}{extra}Content-Length: {len(body)}\r\n\r\n".encode() + body

    async def fire(self, job: ClaimedJob, job_id: str, timeout: float) -> FireResult:
        route = self._route(job.owner, str(job.target.get("url", "")))
        if isinstance(route, TargetRefused):
            return FireResult.permanent(str(route))
        custom = job.target.get("headers")
        lines = None
        if custom:
            try:
                lines = self._custom_lines(custom)
            except TargetRefused as exc:
                return FireResult.permanent(str(exc))
        client = self._client
        if client is None:
            client = self._client = HttpClient(self._policy, self._pool_size)
        try:
            deadline = asyncio.get_running_loop().time() + timeout
            # A connection first, then the request: a firing waiting for one
            # (most of a wave's, with 200 connections) holds no request of
            # its own yet. HttpClient.acquire()'s steps, written out: one
            # coroutine frame less held by each waiting firing
            # (tests/unit/test_preload.py measures what one holds).
            turn = client.turn(deadline)
            if turn is not None:
                try:
                    await turn
                except asyncio.CancelledError:
                    client.pass_on(turn)
                    raise
            conn = client.idle(route.origin) or await client.connect(route.origin, deadline)
            answered = False
            try:
                request = self._request(job, job_id, route, lines)
                status, start = await client.send(conn, request, deadline)
                answered = True
                asked = conn.retry_after
            finally:
                client.release(conn, answered)
        except TimeoutError:
            return FireResult.retry(f"timed out after {timeout:g} s")
        except AddressRefused as exc:
            return FireResult.permanent(str(exc))
        except (HttpClientError, OSError) as exc:
            return FireResult.retry(f"{type(exc).__name__}: {exc}")
        if 200 <= status < 300:
            return FireResult.success()
        text = start.decode(errors="replace").strip()
        detail = f"HTTP {status}" + (f": {text[:200]}" if text else "")
        pause = retry_after(asked.decode("latin-1")) if asked and status in (429, 503) else None
        if pause is not None:
            return FireResult(ok=False, retryable=True, error=detail, retry_after=pause)
        if status in _RETRY_STATUSES or status >= 500:
            return FireResult.retry(detail)
        if 300 <= status < 400:
            return FireResult.permanent(detail + " (redirects are not followed)")
        return FireResult.permanent(detail)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
