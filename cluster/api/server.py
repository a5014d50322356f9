"""The HTTP server's connection protocol: uvicorn's httptools protocol, with
each small response written to its socket in one piece, and the API's hot
routes answered by the protocol itself.

uvicorn writes a response's head (status line and headers) and its body with
two ``transport.write`` calls. On uvloop each is a ``write`` system call
straight away, and on a loopback or LAN link each becomes a TCP segment the
client wakes up for. For a single create (a 200-byte answer) those two
writes were 10 % of the API's CPU. Here the head waits for the body written
in the same turn of the event loop and both go as one write; a head whose
body does not follow in that turn (a stream, a HEAD request, a 204) is
written at the end of the turn, so nothing waits longer than that and the
order of bytes on the connection is the order they were written in.

A single create or a batch (the fast routes of
:class:`~cluster.api.app.RequestAccounting`) is answered without the ASGI
cycle: uvicorn's request task, its ``receive`` and ``send`` messages (each
header checked against two regular expressions), the proxy-headers
middleware, the accounting middleware's own wrapping and Starlette's
response writing were a fifth of a single create's API CPU. The protocol
reads the body into uvicorn's request cycle as uvicorn does, asks the
accounting for the answer, and writes it as uvicorn would have (its default
``server`` and ``date`` headers, ``connection: close`` when the connection
ends, keep-alive and pipelining through the same cycle). Anything else, and
any request a fast route turns down, goes through the ASGI app with the body
read so far, so every error answer is the declared route's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

if TYPE_CHECKING:
    from starlette.responses import Response

    from cluster.api.app import FastRoute, RequestAccounting

__all__ = ["HeadWithBody", "OneWriteHttpProtocol", "VakitHttpProtocol"]

log = logging.getLogger(__name__)


class HeadWithBody:
    """A transport that holds a response head until the next write (or the
    end of the event loop's turn) and writes the two together."""

    __slots__ = (
        "_head",
        "_loop",
        "_transport",
        "abort",
        "get_extra_info",
        "get_protocol",
        "get_write_buffer_size",
        "is_closing",
        "pause_reading",
        "resume_reading",
        "set_protocol",
    )  # fmt: skip

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None
        # What the protocol calls per request, bound once rather than looked
        # up through __getattr__ each time.
        self.get_extra_info = transport.get_extra_info
        self.is_closing = transport.is_closing
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading
        self.set_protocol = transport.set_protocol
        self.get_protocol = transport.get_protocol
        self.get_write_buffer_size = transport.get_write_buffer_size
        self.abort = transport.abort

    def write(self, data: bytes | bytearray | memoryview) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._transport.write(head + bytes(data))
        elif isinstance(data, bytes) and data.startswith(b"HTTP/") and data.endswith(b"\r\n\r\n"):
            self._head = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Write a held head now (its body did not follow in the same turn)."""
        head = self._head
        if head is not None:
            self._head = None
            if not self._transport.is_closing():
                self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a :class:`HeadWithBody` transport."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(HeadWithBody(transport, self.loop))  # type: ignore[arg-type]


class VakitHttpProtocol(OneWriteHttpProtocol):
    """:class:`OneWriteHttpProtocol` that answers the API's fast routes
    itself (see the module's text). Without a Vakit application behind it,
    or with uvicorn's ``reset_contextvars`` on, it is the plain protocol."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # uvicorn's opt-in context reset is its own task's: that path keeps it.
        self.accounting = None if self.config.reset_contextvars else _accounting_of(self.app)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        accounting = self.accounting
        if accounting is not None and app is self.app and not cycle.waiting_for_100_continue:
            fast = accounting.fast_route(cycle.scope)  # type: ignore[arg-type]
            if fast is not None:
                task = self.loop.create_task(_serve(cycle, app, accounting, fast))
                task.add_done_callback(self.tasks.discard)
                self.tasks.add(task)
                return
        super()._start_asgi_task(cycle, app)


def _accounting_of(app: Any) -> RequestAccounting | None:
    """The accounting middleware of the Vakit application under uvicorn's
    wrappers (its proxy-headers middleware), if that is what is served."""
    for _ in range(8):
        accounting = getattr(app, "accounting", None)
        if accounting is not None:
            return accounting  # type: ignore[no-any-return]
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


async def _serve(
    cycle: RequestResponseCycle, app: Any, accounting: RequestAccounting, fast: FastRoute
) -> None:
    """One request on a fast route: its body read whole into the cycle (as
    uvicorn's ``receive`` reads it), the accounting's answer written, or,
    when there is none, the ASGI app run on the same cycle."""
    try:
        limit = accounting.body_limit(cycle.scope["path"])
        # Usually the body came with the head and is whole already.
        while cycle.more_body and not cycle.disconnected and len(cycle.body) <= limit:
            cycle.flow.resume_reading()
            await cycle.message_event.wait()
            cycle.message_event.clear()
        response = None
        if not cycle.more_body and not cycle.disconnected and len(cycle.body) <= limit:
            scope: Any = cycle.scope
            response = await accounting.answer(scope, bytes(cycle.body), fast)
        if response is None:
            # The app's first receive() gets what has been read, and waits
            # for the rest only while more is coming.
            cycle.message_event.set()
            await cycle.run_asgi(app)
            return
        await _write(cycle, response)
    except BaseException as exc:
        # What run_asgi does with an exception that escapes the app.
        log.error("Exception in ASGI application", exc_info=exc)
        if not cycle.response_started:
            await cycle.send_500_response()
        else:
            cycle.transport.close()
        if isinstance(exc, asyncio.CancelledError):
            raise
    finally:
        cycle.on_response = lambda: None


async def _write(cycle: RequestResponseCycle, response: Response) -> None:
    """``response`` on the connection as uvicorn's ``send`` writes it, in one
    write; the cycle left as ``send`` leaves it."""
    if cycle.flow.write_paused and not cycle.disconnected:
        await cycle.flow.drain()
    if cycle.disconnected:
        return
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    if cycle.access_log:
        scope: Any = cycle.scope
        cycle.access_logger.info(
            '%s - "%s %s HTTP/%s" %d',
            get_client_addr(scope),
            scope["method"],
            get_path_with_query_string(scope),
            scope["http_version"],
            response.status_code,
        )
    out: list[Any] = [STATUS_LINE[response.status_code]]
    for name, value in cycle.default_headers:
        out += (name, b": ", value, b"\r\n")
    for name, value in response.raw_headers:
        out += (name, b": ", value, b"\r\n")
    if not cycle.keep_alive:
        out.append(b"connection: close\r\n")
    out += (b"\r\n", response.body)
    cycle.transport.write(b"".join(out))
    cycle.response_complete = True
    cycle.message_event.set()
    if not cycle.keep_alive:
        cycle.transport.close()
    cycle.on_response()
