"""The HTTP target: POST a JSON firing to the job's URL.

2xx is success; 408, 429, 5xx, timeouts and connection errors are retried;
any other status (redirects included: they are not followed) fails at once,
since repeating the same request would get the same answer.

SSRF guard: the URL is parsed once by the policy (with yarl, the client's own
parser) and that parsed URL is what the client gets; the resolver drops the
addresses the policy refuses, and the socket factory checks the address of
every socket before it connects, literals included (aiohttp does not consult
the resolver for those). Redirects are never followed, and no proxy from the
environment is used, so the checked address is the one connected to.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import socket
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from multidict import CIMultiDict
from yarl import URL

from cluster import tracing
from cluster.instants import format_instant
from cluster.model import ClaimedJob
from cluster.targets import FireResult, firing_body, idempotency_key
from cluster.targets.policy import AddressPolicy, AddressRefused, TargetRefused
from cluster.targets.scope import TargetScope
from cluster.targets.signing import Signer

__all__ = ["HttpTarget", "PolicyResolver", "guarded_socket_factory", "retry_after"]

AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]

_RETRY_STATUSES = frozenset({408, 429})
_USER_AGENT = "vakit-worker/0.1"


def retry_after(value: str | None) -> float | None:
    """A Retry-After header's seconds (delay-seconds or an HTTP date), at
    most an hour; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), 3600.0)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, min((when - datetime.now(UTC)).total_seconds(), 3600.0))


class PolicyResolver(AbstractResolver):
    """Resolve names, then drop the addresses the policy refuses (SSRF guard
    against names that resolve to loopback, private or metadata addresses)."""

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        allowed = []
        refusal = None
        for result in results:
            try:
                self._policy.check_address(ipaddress.ip_address(result["host"]), host)
                allowed.append(result)
            except (TargetRefused, ValueError) as exc:
                refusal = exc
        if not allowed:
            raise AddressRefused(f"{host} resolves only to refused addresses: {refusal}")
        return allowed

    async def close(self) -> None:
        await self._inner.close()


def guarded_socket_factory(policy: AddressPolicy) -> Callable[[AddrInfo], socket.socket]:
    """aiohttp's ``socket_factory``: the last word before ``connect()``, on
    the address the socket is for, whatever produced it."""

    def make(addr_info: AddrInfo) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        try:
            policy.check_address(ipaddress.ip_address(sockaddr[0]))
        except (TargetRefused, ValueError) as exc:
            raise AddressRefused(f"refused by the target policy: {exc}") from exc
        return socket.socket(family=family, type=type_, proto=proto)

    return make


def _policy_refusal(exc: BaseException) -> str | None:
    """The policy's refusal (final) behind a connection error, if it is one
    rather than the network's (retried)."""
    seen: BaseException | None = exc
    while seen is not None:
        os_error = getattr(seen, "os_error", None)
        for candidate in (seen, os_error):
            if isinstance(candidate, AddressRefused):
                return str(candidate)
        if "refused by the target policy" in str(seen):  # several addresses, one message
            return str(seen)
        seen = seen.__cause__
    return None


class HttpTarget:
    kind = "HTTP"
    enforces_timeout = True  # aiohttp's total timeout bounds the request

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
        self._session: aiohttp.ClientSession | None = None
        # The policy and the grants never change: a URL is checked once per
        # owner, not per firing (parsing it and its address was 4 % of a
        # worker's CPU in an HTTP wave). Bounded, whatever the URLs.
        self._checked: dict[tuple[str | None, str], URL | TargetRefused] = {}
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    def _parsed(self, owner: str | None, url: str) -> URL | TargetRefused:
        """The URL as parsed (once) by the policy, or why it is refused."""
        key = (owner, url)
        parsed = self._checked.get(key)
        if parsed is None:
            if len(self._checked) >= 10_000:
                self._checked.clear()
            try:
                parsed = self._policy.parse(url)
                if owner is not None:
                    self._scope.check_http(owner, parsed)
            except TargetRefused as exc:
                parsed = exc
            self._checked[key] = parsed
        return parsed

    def _timeout(self, seconds: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(seconds)
        if timeout is None:
            if len(self._timeouts) >= 1_000:
                self._timeouts.clear()
            timeout = self._timeouts[seconds] = aiohttp.ClientTimeout(total=seconds)
        return timeout

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._pool_size,
                resolver=PolicyResolver(self._policy),
                socket_factory=guarded_socket_factory(self._policy),
                ttl_dns_cache=30,
                enable_cleanup_closed=True,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": _USER_AGENT},
                trust_env=False,  # no proxy from the environment: we connect where we checked
            )
        return self._session

    async def fire(self, job: ClaimedJob, job_id: str, timeout: float) -> FireResult:
        owner = job.owner
        url = self._parsed(owner, str(job.target.get("url", "")))
        if isinstance(url, TargetRefused):
            return FireResult.permanent(str(url))
        scheduled_for = format_instant(job.scheduled_for)
        body = firing_body(job, job_id, scheduled_for)
        key = idempotency_key(job, job_id, scheduled_for)
        own = {
            "Content-Type": "application/json",
            "Idempotency-Key": key,
            "Vakit-Job-Id": job_id,
            "Vakit-Scheduled-For": scheduled_for,
            "Vakit-Attempt": str(job.attempt),
        }
        if owner is not None:
            own["Vakit-Owner"] = owner
        own.update(self._signer.headers(owner, key, body))
        # The firing span's trace context (the job's create trace continued),
        # or, with tracing off here, the one stored at create, passed on.
        tracing.inject(own, job.target.get("traceparent"))
        headers: Mapping[str, str] = own
        custom = job.target.get("headers")
        if custom:
            try:
                # Checked again: the deny list may have grown since the create.
                self._scope.check_headers(custom)
            except TargetRefused as exc:
                return FireResult.permanent(str(exc))
            # Case-insensitive: the job's "vakit-job-id" cannot ride along
            # beside ours.
            merged = CIMultiDict(custom)
            merged.update(own)
            headers = merged
        try:
            async with self._client().post(
                url,
                data=body,
                headers=headers,
                allow_redirects=False,
                timeout=self._timeout(timeout),
            ) as resp:
                status = resp.status
                # Read a little of the body for lastError, and so the
                # connection can go back to the keep-alive pool.
                text = (
                    (await resp.content.read(512)).decode(errors="replace") if status >= 300 else ""
                )
                pause = (
                    retry_after(resp.headers.get("Retry-After")) if status in (429, 503) else None
                )
        except TimeoutError:
            return FireResult.retry(f"timed out after {timeout:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            refusal = _policy_refusal(exc)
            if refusal is not None:
                return FireResult.permanent(refusal)
            return FireResult.retry(f"{type(exc).__name__}: {exc}")
        if 200 <= status < 300:
            return FireResult.success()
        detail = f"HTTP {status}" + (f": {text.strip()[:200]}" if text.strip() else "")
        if pause is not None:
            return FireResult(ok=False, retryable=True, error=detail, retry_after=pause)
        if status in _RETRY_STATUSES or status >= 500:
            return FireResult.retry(detail)
        if 300 <= status < 400:
            return FireResult.permanent(detail + " (redirects are not followed)")
        return FireResult.permanent(detail)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            # Let the connector's transports close before the loop ends.
            await asyncio.sleep(0)
            self._session = None
