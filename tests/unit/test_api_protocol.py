"""The API's protocol answers the create routes itself, as the ASGI path would.

A real uvicorn server with :class:`VakitHttpProtocol` serves the Vakit
application on the in-memory stores; a raw socket talks to it, so keep-alive,
pipelining, a body in pieces and ``Connection: close`` are what a client
sends. ``RequestResponseCycle.run_asgi`` is counted: the protocol's own path
runs no ASGI cycle, and what it turns down runs exactly one. Each answer is
compared with the one the same request gets through the ASGI app
(httpx's ASGI transport), so the protocol's path cannot drift from the
declared routes.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from cluster import metrics
from cluster.api.app import create_app
from cluster.api.server import VakitHttpProtocol
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from tests.unit.test_api_fast import body, settings

AUTH = b"Authorization: Bearer token-a\r\n"


@pytest.fixture
def asgi_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests that went through an ASGI cycle."""
    runs: list[str] = []
    original = RequestResponseCycle.run_asgi

    async def counted(self: RequestResponseCycle, app: Any) -> None:
        runs.append(self.scope["path"])
        await original(self, app)

    monkeypatch.setattr(RequestResponseCycle, "run_asgi", counted)
    return runs


@pytest.fixture
async def served() -> AsyncIterator[tuple[int, Any, MemStore]]:
    """(port, app, store): the app behind uvicorn with Vakit's protocol."""
    store = MemStore(2)
    app = create_app(settings(), store=store, crons=MemCronStore(store))
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, http=VakitHttpProtocol, log_config=None, access_log=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    else:
        raise TimeoutError("the server did not start in 5 s")
    yield server.servers[0].sockets[0].getsockname()[1], app, store
    server.should_exit = True
    await task


def _post(payload: bytes, *, extra: bytes = b"", path: bytes = b"/api/v1/jobs") -> bytes:
    return (
        b"POST " + path + b" HTTP/1.1\r\nHost: api\r\n" + AUTH
        + b"Content-Type: application/json\r\n" + extra
        + b"Content-Length: %d\r\n\r\n" % len(payload) + payload
    )  # fmt: skip


def _job(**over: Any) -> bytes:
    return json.dumps(body(**over)).encode()


class Answer:
    def __init__(self, raw: bytes) -> None:
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers: dict[str, list[str]] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers.setdefault(name.strip().lower(), []).append(value.strip())

    def header(self, name: str) -> str | None:
        values = self.headers.get(name)
        return values[0] if values else None

    def json(self) -> Any:
        return json.loads(self.body)


def _read(sock: socket.socket, buffer: bytearray) -> Answer:
    """One response (content-length bodies only) from ``buffer`` and the socket."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a response")
        buffer += chunk
    head_end = buffer.index(b"\r\n\r\n") + 4
    head = bytes(buffer[:head_end]).lower()
    length = int(head.split(b"content-length:")[1].split(b"\r\n")[0]) if b"content-length:" in head else 0
    while len(buffer) < head_end + length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside a response")
        buffer += chunk
    raw = bytes(buffer[: head_end + length])
    del buffer[: head_end + length]
    return Answer(raw)


async def _exchange(port: int, *requests: bytes, pause: float = 0.0) -> list[Answer]:
    """Each request written and its answer read, on one connection."""

    def talk() -> list[Answer]:
        answers, buffer = [], bytearray()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            for request in requests:
                sock.sendall(request)
                answers.append(_read(sock, buffer))
        return answers

    return await asyncio.to_thread(talk)


async def test_creates_on_a_kept_alive_connection_run_no_asgi_cycle(
    served: tuple[int, Any, MemStore], asgi_runs: list[str]
) -> None:
    port, _, _ = served
    answers = await _exchange(port, *(_post(_job(payload={"n": i})) for i in range(3)))
    assert [a.status for a in answers] == [201, 201, 201]
    assert asgi_runs == []
    ids = [a.json()["jobId"] for a in answers]
    assert len(set(ids)) == 3
    for answer in answers:
        assert answer.header("content-type") == "application/json"
        assert int(answer.header("content-length") or -1) == len(answer.body)
        # uvicorn's default headers, as its own send writes them
        assert answer.header("server") == "uvicorn" and answer.header("date")
        assert answer.header("connection") is None
    # The jobs are there: a GET (not a fast route) goes through the ASGI app.
    got = await _exchange(port, b"GET /api/v1/jobs/" + ids[1].encode() + b" HTTP/1.1\r\nHost: api\r\n" + AUTH + b"\r\n")
    assert got[0].status == 200 and got[0].json()["payload"] == {"n": 1}
    assert asgi_runs == [f"/api/v1/jobs/{ids[1]}"]


async def _asgi_answer(app: Any, request: bytes) -> tuple[int, dict[str, str], Any]:
    """The same raw request through the ASGI app, without the protocol."""
    head, _, payload = request.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    headers.pop("Content-Length", None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
        r = await client.request(method, path, content=payload, headers=headers)
    return r.status_code, dict(r.headers), r.json()


@pytest.mark.parametrize(
    ("name", "request_bytes", "status", "cycles"),
    [
        # answered by the protocol: the route's own answers, errors included
        ("created", _post(_job(type="SAME", payload={"k": 1}), extra=b"Idempotency-Key: k-1\r\n"), 201, 0),
        ("unknown token", _post(_job()).replace(b"token-a", b"token-zzz"), 401, 0),
        ("target not allowed", _post(_job(target={"kind": "HTTP", "url": "https://evil.example.org/"})), 422, 0),
        # turned down: the ASGI app answers, through one cycle
        ("invalid body", _post(_job(runAt="tomorrow")), 422, 1),
        ("not strict JSON", _post(_job(payload={"n": "X"}).replace(b'"X"', b"NaN")), 400, 1),
        ("not JSON", _post(b"{nope"), 400, 1),
        ("too large", _post(_job(payload={"blob": "x" * 20_000})), 413, 1),
        ("not a JSON body", _post(b"a=1").replace(b"application/json", b"text/plain"), 422, 1),
        ("a query the rules refuse", _post(_job(), path=b"/api/v1/jobs?owner=%00"), 422, 1),
    ],
)
async def test_an_answer_is_the_one_the_asgi_app_gives(
    served: tuple[int, Any, MemStore],
    asgi_runs: list[str],
    name: str,
    request_bytes: bytes,
    status: int,
    cycles: int,
) -> None:
    port, app, _ = served
    (answer,) = await _exchange(port, request_bytes)
    assert answer.status == status, answer.body
    assert len(asgi_runs) == cycles
    asgi_status, asgi_headers, asgi_body = await _asgi_answer(app, request_bytes)
    if name == "created":
        # The ASGI app saw the same key and body: an idempotent repeat.
        assert asgi_status == 200 and asgi_headers["idempotent-replayed"] == "true"
        assert asgi_body == answer.json()
        return
    assert asgi_status == status
    assert answer.header("content-type") == asgi_headers["content-type"]
    assert answer.json() == asgi_body


async def test_a_declined_request_asks_the_fast_route_once(
    served: tuple[int, Any, MemStore], asgi_runs: list[str]
) -> None:
    port, app, _ = served
    asked: list[bytes] = []
    routes = app.accounting.fast_routes
    original = routes[("POST", "/api/v1/jobs")]

    async def counted(scope: Any, payload: bytes) -> Any:
        asked.append(payload)
        return await original(scope, payload)

    routes[("POST", "/api/v1/jobs")] = counted
    (answer,) = await _exchange(port, _post(_job(maxAttempts=0)))
    assert answer.status == 422
    assert len(asked) == 1 and asgi_runs == ["/api/v1/jobs"]


async def test_pipelined_creates_are_answered_in_order(served: tuple[int, Any, MemStore]) -> None:
    port, _, _ = served
    requests = [_post(_job(payload={"n": i}), extra=b"Idempotency-Key: p-%d\r\n" % i) for i in range(4)]

    def talk() -> list[Answer]:
        buffer = bytearray()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"".join(requests))  # all four before any answer
            return [_read(sock, buffer) for _ in requests]

    answers = await asyncio.to_thread(talk)
    assert [a.status for a in answers] == [201] * 4
    # In order: answer i is the job of request i (its key's payload).
    repeats = await _exchange(port, *requests)
    assert [a.json()["jobId"] for a in repeats] == [a.json()["jobId"] for a in answers]
    assert all(a.status == 200 for a in repeats)


async def test_a_body_in_pieces_is_read_whole(
    served: tuple[int, Any, MemStore], asgi_runs: list[str]
) -> None:
    port, _, _ = served
    request = _post(_job(payload={"pieces": True}))
    head_end = request.index(b"\r\n\r\n") + 4

    def talk() -> Answer:
        buffer = bytearray()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(request[:head_end])
            for i in range(head_end, len(request), 20):
                time.sleep(0.02)  # each piece its own segment, read on its own
                sock.sendall(request[i : i + 20])
            return _read(sock, buffer)

    answer = await asyncio.to_thread(talk)
    assert answer.status == 201, answer.body
    assert asgi_runs == []


async def test_connection_close_is_honoured(served: tuple[int, Any, MemStore]) -> None:
    port, _, _ = served

    def talk() -> tuple[Answer, bytes]:
        buffer = bytearray()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(_post(_job(), extra=b"Connection: close\r\n"))
            answer = _read(sock, buffer)
            return answer, sock.recv(1)  # b"": the server closed

    answer, after = await asyncio.to_thread(talk)
    assert answer.status == 201
    assert answer.header("connection") == "close"
    assert after == b""


async def test_expect_100_continue_goes_through_the_asgi_cycle(
    served: tuple[int, Any, MemStore], asgi_runs: list[str]
) -> None:
    port, _, _ = served
    request = _post(_job(), extra=b"Expect: 100-continue\r\n")
    head_end = request.index(b"\r\n\r\n") + 4

    def talk() -> tuple[bytes, Answer]:
        buffer = bytearray()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(request[:head_end])
            interim = b""
            while b"\r\n\r\n" not in interim:
                interim += sock.recv(65536)
            sock.sendall(request[head_end:])
            return interim, _read(sock, buffer)

    interim, answer = await asyncio.to_thread(talk)
    assert interim.startswith(b"HTTP/1.1 100 Continue")
    assert answer.status == 201
    assert asgi_runs == ["/api/v1/jobs"]


async def test_each_request_is_counted_once(served: tuple[int, Any, MemStore]) -> None:
    port, _, _ = served

    def count(status: str) -> float:
        value: float = metrics.API_REQUESTS.labels("POST", "/api/v1/jobs", status)._value.get()
        return value

    created, invalid = count("201"), count("422")
    await _exchange(port, _post(_job()), _post(_job()), _post(_job(maxAttempts=0)))
    assert count("201") - created == 2
    assert count("422") - invalid == 1


async def test_a_batch_is_answered_by_the_protocol(
    served: tuple[int, Any, MemStore], asgi_runs: list[str]
) -> None:
    port, _, _ = served
    batch = json.dumps({"jobs": [body(payload={"n": i}) for i in range(3)]}).encode()
    (answer,) = await _exchange(port, _post(batch, path=b"/api/v1/jobs:batch"))
    assert answer.status == 200, answer.body
    assert [r["status"] for r in answer.json()["results"]] == [201, 201, 201]
    assert asgi_runs == []
