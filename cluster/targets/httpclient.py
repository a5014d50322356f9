"""The HTTP target's client: HTTP/1.1 POSTs over kept-alive connections,
on the event loop's own transports, answers parsed by httptools.

Why not aiohttp (it was the client until issue 43): at a round hour a
worker fires tens of thousands of POSTs at once, and aiohttp spent about
140 us of CPU on each (a request object, multidicts for the headers, a
response object with its stream, timers, a cookie jar, the connector's
bookkeeping) and held ~10 KB per firing waiting for a connection: 650 MB
in a worker holding a wave. Here a firing is one bytes object written to a
pooled connection and a status read back; the table of clients measured
is in docs/results/2026-12-07-issue-43.md.

What it guarantees, as the aiohttp client did:

- **SSRF at connect**: every address a socket is about to connect to is
  checked by the :class:`~cluster.targets.policy.AddressPolicy` (literals
  and resolved names alike); a name whose addresses are all refused fails
  with :class:`~cluster.targets.policy.AddressRefused`. No proxy, no
  redirect is ever followed: the checked address is the one connected to.
- **Timeouts**: the caller's deadline covers waiting for a connection,
  connecting, TLS, writing and the whole answer.
- **A bounded answer**: at most :data:`KEEP_BYTES` of an answer's body are
  kept (for ``lastError``) and at most :data:`MAX_ANSWER_BYTES` read; a
  longer answer ends the connection instead of being read to its end.
- **A bounded pool**: at most ``limit`` requests in flight (connections in
  use) over all hosts, idle connections kept per origin for
  :data:`KEEPALIVE_SECONDS`. A firing waiting for a connection holds
  nothing but its place in the queue.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import httptools

from cluster.targets.deadlines import Deadlines
from cluster.targets.policy import AddressPolicy, AddressRefused, TargetRefused

__all__ = [
    "KEEPALIVE_SECONDS",
    "KEEP_BYTES",
    "MAX_ANSWER_BYTES",
    "ConnectFailed",
    "Disconnected",
    "HttpClient",
    "HttpClientError",
    "Origin",
]

# Bytes of an answer's body kept: what lastError shows of a refusal.
KEEP_BYTES = 512
# Bytes of an answer read at most; a longer one closes its connection.
MAX_ANSWER_BYTES = 64 * 1024
# An idle connection is not reused after this long (aiohttp's default):
# servers close idle ones, and a request written as they do is lost.
KEEPALIVE_SECONDS = 15.0
# How long a name's addresses are reused before it is resolved again.
DNS_TTL_SECONDS = 30.0
_DNS_ENTRIES = 1_000

# (scheme, host as in the URL, port)
Origin = tuple[str, str, int]
_Answer = tuple[int, bytes]


class HttpClientError(Exception):
    """The request failed on the way (the network's failure, retried)."""


class ConnectFailed(HttpClientError):
    """No connection could be made to any address of the origin."""


class Disconnected(HttpClientError):
    """The connection closed (or sent garbage) before a whole answer came."""


class _Connection(asyncio.Protocol):
    """One kept-alive connection; one request at a time on it."""

    __slots__ = (
        "_kept",
        "_parser",
        "_seen",
        "_status",
        "_waiter",
        "_wants_body",
        "headers_done",
        "idle_since",
        "origin",
        "retry_after",
        "transport",
        "usable",
    )

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[_Answer] | None = None
        self._status = 0
        self._kept: list[bytes] = []
        self._seen = 0
        self._wants_body = False
        self.headers_done = False
        self.usable = True
        self.idle_since = 0.0
        # A refusal's Retry-After, as sent (429/503 slow a limited key).
        self.retry_after: bytes | None = None

    # asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(Disconnected(f"bad answer: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        if self.headers_done:
            # An answer framed by the connection's end: complete as it is.
            self._complete()
        else:
            self._fail(
                Disconnected(f"server disconnected: {exc}" if exc else "server disconnected")
            )

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost settles the waiter

    # httptools callbacks
    def on_status(self, status: bytes) -> None:
        self._status = self._parser.get_status_code()
        # A success's body is not looked at; a refusal's start is lastError.
        self._wants_body = self._status >= 300

    def on_header(self, name: bytes, value: bytes) -> None:
        # Only a refusal's headers are looked at, and only this one.
        if self._wants_body and len(name) == 11 and name.lower() == b"retry-after":
            self.retry_after = value

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        seen = self._seen
        if self._wants_body and seen < KEEP_BYTES:
            self._kept.append(body[: KEEP_BYTES - seen])
        self._seen = seen + len(body)
        if self._seen > MAX_ANSWER_BYTES:
            # Not read to its end: the connection cannot be reused.
            self.usable = False
            self._complete()
            self.close()

    def on_message_complete(self) -> None:
        if 100 <= self._status < 200:
            # Informational (100 Continue, 103 Early Hints): the answer follows.
            self._status, self._kept, self._seen, self.headers_done = 0, [], 0, False
            return
        if not self._parser.should_keep_alive():
            self.usable = False
        self._complete()

    def _complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None:
            # An answer to no request (a server's 408 on an idle connection):
            # what comes next on it cannot be trusted to be ours.
            self.usable = False
        status, kept = self._status, self._kept
        self._status, self._kept, self._seen, self.headers_done = 0, [], 0, False
        if waiter is not None and not waiter.done():
            waiter.set_result((status, b"".join(kept) if kept else b""))

    def _fail(self, exc: Exception) -> None:
        self.usable = False
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def send(self, request: bytes) -> asyncio.Future[_Answer]:
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        self.retry_after = None
        self.transport.write(request)
        return waiter

    def close(self) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.close()


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class HttpClient:
    """A pool of connections over all origins; :meth:`post` sends one
    prepared request and returns ``(status, start of the body)``."""

    def __init__(
        self,
        policy: AddressPolicy,
        limit: int = 200,
        *,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._policy = policy
        # Free connection slots, and the waiters for one, first come first
        # served (asyncio.Semaphore scanned its woken waiters on every
        # release: 12 % of a wave's CPU with 20,000 firings waiting).
        self._free = limit
        self._queue: deque[asyncio.Future[None]] = deque()
        self._deadlines = Deadlines()
        self._idle: dict[Origin, list[_Connection]] = {}
        self._dns: dict[tuple[str, int], tuple[float, list[tuple[Any, ...]]]] = {}
        self._ssl = ssl_context
        self._clock = clock
        self._closed = False

    async def post(self, origin: Origin, request: bytes, timeout: float) -> _Answer:
        """Send ``request`` (the whole HTTP/1.1 message) to ``origin`` within
        ``timeout`` seconds: :class:`TimeoutError`, :class:`HttpClientError`
        or :class:`AddressRefused` otherwise."""
        deadline = asyncio.get_running_loop().time() + timeout
        conn = await self.acquire(origin, deadline)
        answered = False
        try:
            answer = await self.send(conn, request, deadline)
            answered = True
        finally:
            self.release(conn, answered)
        return answer

    async def acquire(self, origin: Origin, deadline: float) -> _Connection:
        """A connection to ``origin`` of this caller's own, once one of the
        ``limit`` is free: kept alive from before, or new; by ``deadline``
        (the loop's time), :class:`TimeoutError` otherwise. Given back
        with :meth:`release`. (:meth:`turn`, :meth:`idle` and
        :meth:`connect` are its steps, for a caller that saves a frame.)"""
        turn = self.turn(deadline)
        if turn is not None:
            try:
                await turn
            except asyncio.CancelledError:
                self.pass_on(turn)
                raise
        return self.idle(origin) or await self.connect(origin, deadline)

    def turn(self, deadline: float) -> asyncio.Future[None] | None:
        """A slot: None when one was free and is now the caller's, else the
        caller's place in the queue, a future done when a slot is handed
        to it (failed with :class:`TimeoutError` at ``deadline``). A
        caller cancelled while it waits calls :meth:`pass_on`."""
        if self._free > 0 and not self._queue:
            self._free -= 1
            return None
        turn = asyncio.get_running_loop().create_future()
        self._queue.append(turn)
        self._deadlines.watch(turn, deadline)
        return turn

    def pass_on(self, turn: asyncio.Future[None]) -> None:
        """The waiter of ``turn`` was cancelled: a slot handed to it as it
        was goes to the next one."""
        if turn.done() and not turn.cancelled() and turn.exception() is None:
            self._next()

    def idle(self, origin: Origin) -> _Connection | None:
        """A kept-alive connection to ``origin`` for the holder of a slot."""
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = self._clock()
        while idle:
            conn = idle.pop()  # the most recently used: the likeliest alive
            if conn.usable and now - conn.idle_since < KEEPALIVE_SECONDS:
                return conn
            conn.close()
        return None

    async def connect(self, origin: Origin, deadline: float) -> _Connection:
        """A new connection to ``origin`` for the holder of a slot, by
        ``deadline``; the slot is freed if none can be made."""
        try:
            async with asyncio.timeout_at(deadline):
                return await self._connect(origin)
        except BaseException:
            self._next()
            raise

    async def send(self, conn: _Connection, request: bytes, deadline: float) -> _Answer:
        """Write ``request`` on ``conn`` and wait for its answer until
        ``deadline``: ``(status, start of the body)``."""
        answer = conn.send(request)
        self._deadlines.watch(answer, deadline)
        return await answer

    def release(self, conn: _Connection, answered: bool) -> None:
        """Give ``conn`` back: kept for the next request when its answer
        came whole (``answered``) and it may stay open, closed otherwise."""
        if answered and conn.usable and not self._closed:
            conn.idle_since = self._clock()
            self._idle.setdefault(conn.origin, []).append(conn)
        else:
            conn.close()  # cancelled mid-answer: in no known state
        self._next()

    def _next(self) -> None:
        """A slot is free: the longest waiter still waiting gets it."""
        queue = self._queue
        while queue:
            turn = queue.popleft()
            if not turn.done():  # a waiter whose deadline passed is cancelled
                turn.set_result(None)
                return
        self._free += 1

    async def _addresses(self, host: str, port: int) -> list[tuple[Any, ...]]:
        """``(family, type, proto, sockaddr)`` of ``host`` the policy allows."""
        if _literal(host):
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, (host, port))]
        now = self._clock()
        cached = self._dns.get((host, port))
        if cached is not None and cached[0] > now:
            return cached[1]
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ConnectFailed(f"cannot resolve {host}: {exc}") from exc
        allowed, refusal = [], None
        for family, type_, proto, _, sockaddr in infos:
            try:
                self._policy.check_address(ipaddress.ip_address(sockaddr[0]), host)
            except (TargetRefused, ValueError) as exc:
                refusal = exc
                continue
            allowed.append((family, type_, proto, sockaddr))
        if not allowed:
            raise AddressRefused(f"{host} resolves only to refused addresses: {refusal}")
        if len(self._dns) >= _DNS_ENTRIES:
            self._dns.clear()
        self._dns[(host, port)] = (now + DNS_TTL_SECONDS, allowed)
        return allowed

    async def _connect(self, origin: Origin) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        failures = []
        for family, type_, proto, sockaddr in await self._addresses(host, port):
            try:
                # The last word, on the address the socket is for, whatever
                # produced it (a literal, the cache, a fresh resolution).
                self._policy.check_address(ipaddress.ip_address(sockaddr[0]))
            except (TargetRefused, ValueError) as exc:
                raise AddressRefused(f"refused by the target policy: {exc}") from exc
            sock = socket.socket(family, type_, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, sockaddr)
                tls = self._context() if scheme == "https" else None
                _, conn = await loop.create_connection(
                    lambda: _Connection(origin),
                    sock=sock,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
            except OSError as exc:
                sock.close()
                failures.append(f"{sockaddr[0]}: {exc}")
                continue
            except BaseException:
                sock.close()
                raise
            return conn
        raise ConnectFailed(f"cannot connect to {host}:{port}: {'; '.join(failures)}")

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def close(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        self._deadlines.close()
        # Let the transports close before the loop ends.
        await asyncio.sleep(0)
