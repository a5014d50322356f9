"""The HTTP server's connection protocol: uvicorn's httptools protocol, with
each small response written to its socket in one piece.

uvicorn writes a response's head (status line and headers) and its body with
two ``transport.write`` calls. On uvloop each is a ``write`` system call
straight away, and on a loopback or LAN link each becomes a TCP segment the
client wakes up for. For a single create (a 200-byte answer) those two
writes were 10 % of the API's CPU. Here the head waits for the body written
in the same turn of the event loop and both go as one write; a head whose
body does not follow in that turn (a stream, a HEAD request, a 204) is
written at the end of the turn, so nothing waits longer than that and the
order of bytes on the connection is the order they were written in.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HeadWithBody", "OneWriteHttpProtocol"]


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
