"""A fast HTTP target for the benchmarks: answers every POST with 200.

Runs in its own process (``python -m benchmarks.sink --port N``) so that its
CPU is not the harness's and shows up on its own in the report. ``GET
/count`` returns how many firings it answered.

The sink stands in for the users' services, which run on other machines: on
a 2-core benchmark machine every microsecond it spends is taken from the
workers it measures. So it is an asyncio protocol on uvloop with httptools'
parser (both already Vakit dependencies, through uvicorn) rather than a web
framework: about a fifth of aiohttp.web's CPU per request. It reads each
request whole (a real target would) and keeps connections alive.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import httptools
import uvloop

__all__ = ["SinkProtocol", "main"]

_OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
_BAD = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class _Counter:
    firings = 0


class SinkProtocol(asyncio.Protocol):
    """One connection: each complete request is answered at once."""

    def __init__(self, counter: _Counter) -> None:
        self.counter = counter
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None  # uvloop's TCPTransport (not an asyncio.Transport subclass)
        self.url = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(_BAD)
            self.transport.close()

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        if method == b"POST":
            self.counter.firings += 1
            self.transport.write(_OK)
        elif method == b"GET" and self.url == b"/count":
            text = str(self.counter.firings).encode()
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: "
                + str(len(text)).encode()
                + b"\r\n\r\n"
                + text
            )
        else:
            self.transport.write(_NOT_FOUND)
        if not self.parser.should_keep_alive():
            self.transport.close()


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    counter = _Counter()
    server = await loop.create_server(lambda: SinkProtocol(counter), host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
