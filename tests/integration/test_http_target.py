"""The HTTP target against a real HTTP server on loopback: what a receiver
gets, and how each answer maps to an outcome."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web

import shardmap
from cluster.model import ClaimedJob
from cluster.targets.http import HttpTarget
from cluster.targets.policy import AddressPolicy
from tests.helpers import claimed_job

T0 = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)


class Receiver:
    """Answers POST /{status} with that status; /slow never answers in time."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.base = ""
        self._runner: web.AppRunner | None = None
        self._released = asyncio.Event()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append((request.path, dict(request.headers), body))
        name = request.match_info["name"]
        if name == "slow":
            await self._released.wait()  # until the test ends
            return web.Response(status=200)
        status = int(name)
        if 300 <= status < 400:
            raise web.HTTPFound("/200")
        return web.Response(status=status, text="" if status < 300 else f"nope {status}")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{name}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    yield r
    await r.stop()


@pytest.fixture
async def target() -> AsyncIterator[HttpTarget]:
    t = HttpTarget(AddressPolicy(allow_private=True))
    yield t
    await t.close()


def job(url: str, attempt: int = 2) -> ClaimedJob:
    return claimed_job(
        {"kind": "HTTP", "url": url, "headers": {"X-Team": "payments"}},
        attempt=attempt,
        type="order.cancel",
        payload_json='{"orderId": 98213, "big": 123456789012345678901234567890}',
        scheduled_for=T0,
    )


async def test_success_carries_what_a_receiver_deduplicates_on(
    receiver: Receiver, target: HttpTarget
) -> None:
    j = job(f"{receiver.base}/204")
    job_id = shardmap.encode_id("job", j.id)
    result = await target.fire(j, job_id, 5.0)
    assert result.ok and result.error is None
    [(path, headers, body)] = receiver.requests
    assert path == "/204"
    assert body == {
        "jobId": job_id,
        "type": "order.cancel",
        "scheduledFor": "2026-11-30T00:00:00Z",
        "attempt": 2,
        # Spliced in as stored: even a number beyond a 64-bit integer or a
        # double arrives exactly as the client sent it.
        "payload": {"orderId": 98213, "big": 123456789012345678901234567890},
    }
    assert headers["Vakit-Job-Id"] == job_id
    assert headers["Vakit-Attempt"] == "2"
    assert headers["Vakit-Scheduled-For"] == "2026-11-30T00:00:00Z"
    assert headers["Idempotency-Key"] == f"{job_id}:2026-11-30T00:00:00Z"
    assert headers["X-Team"] == "payments"  # the job's own headers go along


@pytest.mark.parametrize(
    ("status", "retryable", "error"),
    [
        (500, True, "HTTP 500: nope 500"),
        (503, True, "HTTP 503: nope 503"),
        (429, True, "HTTP 429: nope 429"),
        (408, True, "HTTP 408: nope 408"),
        (404, False, "HTTP 404: nope 404"),
        (400, False, "HTTP 400: nope 400"),
        (302, False, "HTTP 302"),
    ],
)
async def test_answers_map_to_outcomes(
    receiver: Receiver, target: HttpTarget, status: int, retryable: bool, error: str
) -> None:
    result = await target.fire(job(f"{receiver.base}/{status}"), "job_x", 5.0)
    assert not result.ok
    assert result.retryable is retryable
    assert result.error is not None and result.error.startswith(error)
    if status == 302:
        assert "redirects are not followed" in result.error
        assert [path for path, _, _ in receiver.requests] == ["/302"]  # not followed


async def test_timeout_is_retried(receiver: Receiver, target: HttpTarget) -> None:
    result = await target.fire(job(f"{receiver.base}/slow"), "job_x", 0.3)
    assert not result.ok and result.retryable
    assert result.error == "timed out after 0.3 s"


async def test_connection_refused_is_retried(target: HttpTarget) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = await target.fire(job(f"http://127.0.0.1:{port}/"), "job_x", 5.0)
    assert not result.ok and result.retryable
    assert "Connect" in (result.error or "")


async def test_refused_address_fails_for_good_without_a_request(receiver: Receiver) -> None:
    strict = HttpTarget(AddressPolicy(hosts=frozenset({"hooks.example.com"})))
    try:
        for _ in range(2):  # the second answer comes from the checked-URL cache
            result = await strict.fire(job(f"{receiver.base}/200"), "job_x", 5.0)
            assert not result.ok and not result.retryable
            assert "127.0.0.1" in (result.error or "")
    finally:
        await strict.close()
    assert receiver.requests == []
