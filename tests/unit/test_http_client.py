"""The HTTP target's client (cluster/targets/httpclient.py) against raw
servers on loopback: connection reuse and its bound, the bounded answer,
deadlines while waiting; and the deadline heap on its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest

from cluster.targets.deadlines import Deadlines
from cluster.targets.httpclient import KEEP_BYTES, Disconnected, HttpClient
from cluster.targets.policy import AddressPolicy

POLICY = AddressPolicy(allow_private=True)
REQUEST = b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}"
# A request's bytes -> the answer (None: never; b"": hang up).
Answer = Callable[[bytes], bytes | None]


class Server:
    """Answers each whole request with ``answer(request)``; counts
    connections and the most open at once."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                request = head + await reader.readexactly(length)
                answer = self.answer(request)
                if answer is None:
                    await asyncio.sleep(3600)
                if not answer:
                    break  # hang up without answering
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.open -= 1
            writer.close()

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


def ok(request: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    c = HttpClient(POLICY, limit=3)
    yield c
    await c.close()


async def test_connections_are_kept_alive_and_bounded(client: HttpClient) -> None:
    async with Server(ok) as server:
        origin = ("http", "127.0.0.1", server.port)
        for _ in range(3):
            assert await client.post(origin, REQUEST, 5.0) == (200, b"")
        assert server.connections == 1  # one kept-alive connection, reused
        answers = await asyncio.gather(*(client.post(origin, REQUEST, 5.0) for _ in range(50)))
        assert answers == [(200, b"")] * 50
        assert server.most_open <= 3  # the pool's limit


async def test_an_answer_is_read_within_its_bound(client: HttpClient) -> None:
    long = b"x" * 200_000

    def refusal(request: bytes) -> bytes:
        return b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n%s" % (len(long), long)

    async with Server(refusal) as server:
        status, start = await client.post(("http", "127.0.0.1", server.port), REQUEST, 5.0)
        assert status == 500 and start == long[:KEEP_BYTES]
        await asyncio.sleep(0.05)
        assert server.open == 0  # not read to its end: the connection was closed


async def test_informational_answers_are_skipped(client: HttpClient) -> None:
    def hints(request: bytes) -> bytes:
        return b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + ok(request)

    async with Server(hints) as server:
        origin = ("http", "127.0.0.1", server.port)
        assert await client.post(origin, REQUEST, 5.0) == (200, b"")
        assert await client.post(origin, REQUEST, 5.0) == (200, b"")
        assert server.connections == 1


async def test_a_close_before_the_answer_is_the_networks_failure(client: HttpClient) -> None:
    async with Server(lambda request: b"") as server:
        with pytest.raises(Disconnected):
            await client.post(("http", "127.0.0.1", server.port), REQUEST, 5.0)


async def test_a_deadline_bounds_the_answer_and_the_wait_for_a_connection(
    client: HttpClient,
) -> None:
    async with Server(lambda request: None) as server:  # never answers
        origin = ("http", "127.0.0.1", server.port)
        started = asyncio.get_running_loop().time()
        # Three take the connections, three more wait for one: all six
        # time out by their deadline.
        results = await asyncio.gather(
            *(client.post(origin, REQUEST, 0.2) for _ in range(6)), return_exceptions=True
        )
        assert all(isinstance(r, TimeoutError) for r in results), results
        assert asyncio.get_running_loop().time() - started < 1.0
    async with Server(ok) as again:  # the slots came back
        assert await client.post(("http", "127.0.0.1", again.port), REQUEST, 5.0) == (200, b"")


async def test_deadlines_fail_only_what_is_still_pending() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(granularity=0.01)
    late, settled = loop.create_future(), loop.create_future()
    deadlines.watch(late, loop.time() + 0.05)
    deadlines.watch(settled, loop.time() + 0.05)
    settled.set_result(1)
    with pytest.raises(TimeoutError):
        await late
    assert settled.result() == 1
    # Settled futures do not pile up: the heap is rebuilt from the pending.
    pending = loop.create_future()
    deadlines.watch(pending, loop.time() + 60)
    for _ in range(5_000):
        f = loop.create_future()
        deadlines.watch(f, loop.time() + 60)
        f.set_result(None)
    assert len(deadlines) < 2_100
    deadlines.close()


@pytest.mark.parametrize("type_", ["order.cancel", 'quote " and \\ back', "é\u2028\n\x00", ""])
def test_the_firing_body_is_json_dumps_text_byte_for_byte(type_: str) -> None:
    # Written out by hand for speed; a receiver's signature check covers
    # these bytes, so they stay what json.dumps of the document wrote.
    import json

    from cluster.instants import format_instant
    from cluster.targets import firing_body
    from tests.helpers import claimed_job

    job = claimed_job({"kind": "HTTP", "url": "http://x/"}, type=type_, attempt=3, payload_json='{"a": [1, 2]}')
    head = json.dumps(
        {"jobId": "job_1", "type": type_, "scheduledFor": format_instant(job.scheduled_for), "attempt": 3}
    )
    assert firing_body(job, "job_1") == f'{head[:-1]}, "payload": {{"a": [1, 2]}}}}'.encode()
    # A run a calendar moved (or a retry's backoff): the actual time after the nominal one.
    moved = job._replace(run_at=job.scheduled_for + timedelta(days=1, microseconds=5))
    head = json.dumps(
        {"jobId": "job_1", "type": type_, "scheduledFor": format_instant(job.scheduled_for),
         "runAt": format_instant(moved.run_at), "attempt": 3}
    )  # fmt: skip
    assert firing_body(moved, "job_1") == f'{head[:-1]}, "payload": {{"a": [1, 2]}}}}'.encode()
