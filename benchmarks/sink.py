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

``GET /stats`` says what the sink itself cost, so a load tester can tell a
figure of Vakit's from one of the sink's: firings answered, and the answer
latency (from a request's first byte read to its answer written, in
microseconds: p50, p99, max). Its CPU is the harness's to measure (its own
process: ``usage.cpu_us_per_job.sink``).

With ``--record PATH`` it also writes one line per firing to PATH: the
arrival time (epoch seconds) and the firing's JSON body as it came (jobId,
scheduledFor, attempt, payload), for an audit of what arrived how often
(benchmarks.reshard). ``GET /flush`` writes out what is buffered; SIGTERM
flushes and stops.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from typing import IO, Any

import httptools
import uvloop

__all__ = ["SinkProtocol", "main"]

_OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
_BAD = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class _Counter:
    firings = 0
    # Where each firing is noted (``--record``); None: counted only.
    record: IO[bytes] | None = None

    def __init__(self) -> None:
        # Answer latency: answers per whole microsecond (capped at 1 s).
        self.latency_us: dict[int, int] = {}

    def stats(self) -> dict[str, object]:
        total = sum(self.latency_us.values())
        quantiles: dict[str, int | None] = {"p50": None, "p99": None, "max": None}
        if total:
            seen = 0
            for us in sorted(self.latency_us):
                seen += self.latency_us[us]
                for name, q in (("p50", 0.5), ("p99", 0.99)):
                    if quantiles[name] is None and seen >= q * total:
                        quantiles[name] = us
            quantiles["max"] = max(self.latency_us)
        return {"firings": self.firings, "answer_latency_us": quantiles}


class SinkProtocol(asyncio.Protocol):
    """One connection: each complete request is answered at once."""

    def __init__(self, counter: _Counter) -> None:
        self.counter = counter
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None  # uvloop's TCPTransport (not an asyncio.Transport subclass)
        self.url = b""
        self.body: list[bytes] = []
        self.began = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(_BAD)
            self.transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.began = time.perf_counter_ns()

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_body(self, body: bytes) -> None:
        if self.counter.record is not None:
            self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        if method == b"POST":
            self.counter.firings += 1
            record = self.counter.record
            if record is not None:
                # Noted before the answer: a firing answered 200 is on file.
                # A JSON body has no raw newline, so one line is one firing.
                record.write(b"%.6f %s\n" % (time.time(), b"".join(self.body)))
                self.body.clear()
            self.transport.write(_OK)
            us = min((time.perf_counter_ns() - self.began) // 1000, 1_000_000)
            latency = self.counter.latency_us
            latency[us] = latency.get(us, 0) + 1
        elif method == b"GET" and self.url == b"/stats":
            text = json.dumps(self.counter.stats()).encode()
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                + str(len(text)).encode()
                + b"\r\n\r\n"
                + text
            )
        elif method == b"GET" and self.url in (b"/count", b"/flush"):
            if self.url == b"/flush" and self.counter.record is not None:
                self.counter.record.flush()
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


async def serve(host: str, port: int, record: IO[bytes] | None = None) -> None:
    """Answer firings until cancelled; with ``record``, until SIGTERM, noting
    each firing there."""
    loop = asyncio.get_running_loop()
    counter = _Counter()
    counter.record = record
    server = await loop.create_server(lambda: SinkProtocol(counter), host, port, backlog=1024)
    async with server:
        if record is None:
            await server.serve_forever()
            return
        # The harness stops its processes with SIGTERM: the record is then
        # closed (flushed) by main, not lost with a killed process.
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--record", help="append each firing (arrival time, body) to this file")
    args = parser.parse_args(argv)
    if args.record is None:
        uvloop.run(serve(args.host, args.port))
        return
    with open(args.record, "ab", buffering=1 << 20) as record:
        uvloop.run(serve(args.host, args.port, record))


if __name__ == "__main__":
    main()
