"""A lean HTTP/1.1 client for the load generator: keep-alive connections on
uvloop, responses parsed by httptools, requests written as prepared bytes.

The load generator shares the 2-core machine with the API, the workers and
PostgreSQL. On aiohttp it cost 360 us of CPU per request (measured by
benchmarks.sustained's process sampler at 1,160 requests/s), as much as
PostgreSQL spent on each job: load the system under test never saw. This is
the sink's approach (benchmarks/sink.py) on the client side. One request at
a time per connection (no pipelining); a connection that fails is dropped
and the next request opens a new one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httptools

__all__ = ["HttpError", "LeanClient", "Response"]

# A connection idle longer than this is not reused: servers close idle ones
# (uvicorn after 5 s), and a request written as they do is lost.
_IDLE_SECONDS = 3.0


class HttpError(Exception):
    """The connection failed or closed before a whole response came."""


@dataclass
class Response:
    status: int
    body: bytes


@dataclass
class _Parsing:
    status: int = 0
    chunks: list[bytes] = field(default_factory=list)


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport
        self._parser = httptools.HttpResponseParser(self)
        self._state = _Parsing()
        self._waiter: asyncio.Future[Response] | None = None
        self.usable = True
        self.idle_since = 0.0

    # asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(HttpError(f"bad response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(HttpError(f"connection closed: {exc}" if exc else "connection closed"))

    # httptools callbacks
    def on_status(self, status: bytes) -> None:
        self._state.status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self._state.chunks.append(body)

    def on_message_complete(self) -> None:
        state, self._state = self._state, _Parsing()
        if not self._parser.should_keep_alive():
            self.usable = False
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(Response(state.status, b"".join(state.chunks)))

    def _fail(self, exc: Exception) -> None:
        self.usable = False
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    async def send(self, request: bytes) -> Response:
        if not self.usable or self.transport is None:
            raise HttpError("connection not usable")
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self._waiter

    def close(self) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.close()


class LeanClient:
    """POSTs to one base URL over at most ``connections`` kept-alive
    connections; ``post`` waits for a free one."""

    def __init__(self, base_url: str, headers: dict[str, str], *, connections: int) -> None:
        url = urlsplit(base_url)
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or 80
        fixed = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._head = f"Host: {url.netloc}\r\n{fixed}Content-Type: application/json\r\n"
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(connections)

    def request(self, path: str, body: bytes) -> bytes:
        head = f"POST {path} HTTP/1.1\r\n{self._head}Content-Length: {len(body)}\r\n\r\n"
        return head.encode("latin-1") + body

    async def post(self, path: str, body: bytes, timeout: float = 30.0) -> Response:
        request = self.request(path, body)
        async with self._slots:
            conn = None
            now = time.monotonic()
            while self._idle and conn is None:
                conn = self._idle.pop()
                # Closed by the server while idle, or about to be (uvicorn
                # closes a connection idle for 5 s, and a request sent as it
                # does is lost): not used, nothing was sent on it.
                if not conn.usable or now - conn.idle_since > _IDLE_SECONDS:
                    conn.close()
                    conn = None
            try:
                if conn is None:
                    loop = asyncio.get_running_loop()
                    _, conn = await loop.create_connection(_Connection, self._host, self._port)
                async with asyncio.timeout(timeout):
                    response = await conn.send(request)
            except (OSError, HttpError, TimeoutError):
                if conn is not None:
                    conn.close()
                raise
            if conn.usable:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
            else:
                conn.close()
            return response

    async def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()
