"""The API's HTTP protocol: a response's head and body go out as one write,
and nothing is held past the event loop's turn.

A transport that records its writes, then a real uvicorn server with the
protocol, asked by a raw socket for what a held head could break: a
streamed body, a HEAD request, a 204, a keep-alive sequence.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import uvicorn

from cluster.api.server import HeadWithBody, OneWriteHttpProtocol

HEAD = b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n"


class Recording:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


async def test_a_head_and_its_body_are_one_write() -> None:
    raw = Recording()
    transport = HeadWithBody(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(HEAD)
    assert raw.writes == []
    transport.write(b"{}")
    assert raw.writes == [HEAD + b"{}"]
    await asyncio.sleep(0)  # the end-of-turn flush finds nothing held
    assert raw.writes == [HEAD + b"{}"]


async def test_a_head_without_a_body_is_written_at_the_end_of_the_turn() -> None:
    raw = Recording()
    transport = HeadWithBody(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(HEAD)
    await asyncio.sleep(0)
    assert raw.writes == [HEAD]
    transport.write(b"chunk")  # a later body chunk goes on its own, after the head
    assert raw.writes == [HEAD, b"chunk"]


async def test_closing_writes_a_held_head_first() -> None:
    raw = Recording()
    transport = HeadWithBody(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(HEAD)
    transport.close()
    assert raw.writes == [HEAD] and raw.closed


async def test_other_bytes_pass_straight_through() -> None:
    raw = Recording()
    transport = HeadWithBody(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"0\r\n\r\n")  # a chunked body's end is not a head
    assert raw.writes == [b"0\r\n\r\n"]


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    path = scope["path"]
    if path == "/stream":  # the body comes later than the head, in pieces
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for piece in (b"one,", b"two"):
            await asyncio.sleep(0.05)
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/empty":
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
    else:
        body = b'{"ok":true}'
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _read_response(sock: socket.socket, head_only: bool) -> bytes:
    """One response, read until its end (content-length, chunked or none)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while not rest.endswith(b"0\r\n\r\n"):
            rest += sock.recv(65536)
    elif b"content-length:" in lower and not head_only:
        length = int(lower.split(b"content-length:")[1].split(b"\r\n")[0])
        while len(rest) < length:
            rest += sock.recv(65536)
    return head + b"\r\n\r\n" + rest


@pytest.fixture
async def server() -> Any:
    config = uvicorn.Config(_app, host="127.0.0.1", port=0, http=OneWriteHttpProtocol, log_config=None)
    srv = uvicorn.Server(config)
    task = asyncio.create_task(srv.serve())
    for _ in range(500):  # uvicorn says it has started with a flag only
        if srv.started:
            break
        await asyncio.sleep(0.01)
    else:
        raise TimeoutError("the server did not start in 5 s")
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield port
    srv.should_exit = True
    await task


async def test_responses_of_every_shape_arrive_whole_on_one_connection(server: int) -> None:
    def talk() -> list[bytes]:
        with socket.create_connection(("127.0.0.1", server), timeout=5) as sock:
            answers = []
            for request in (
                b"POST /create HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}",
                b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n",
                b"GET /empty HTTP/1.1\r\nhost: x\r\n\r\n",
                b"HEAD /create HTTP/1.1\r\nhost: x\r\n\r\n",
                b"POST /create HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n",
            ):
                sock.sendall(request)
                answers.append(_read_response(sock, head_only=request.startswith(b"HEAD")))
            return answers

    created, streamed, empty, head, again = await asyncio.to_thread(talk)
    assert created.startswith(b"HTTP/1.1 201") and created.endswith(b'{"ok":true}')
    assert streamed.startswith(b"HTTP/1.1 200") and b"one," in streamed and b"two" in streamed
    assert empty.startswith(b"HTTP/1.1 204")
    assert head.startswith(b"HTTP/1.1 201") and head.endswith(b"\r\n\r\n")  # no body
    assert again.startswith(b"HTTP/1.1 201") and again.endswith(b'{"ok":true}')
