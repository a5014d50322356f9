"""The load generator's lean HTTP client against a real local server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from benchmarks.leanhttp import LeanClient


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[tuple[str, bytes, str]]]]:
    seen: list[tuple[str, bytes, str]] = []

    async def create(request: web.Request) -> web.Response:
        body = await request.read()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        seen.append((request.headers["Authorization"], body, str(peer)))
        return web.json_response({"n": len(seen)}, status=201)

    app = web.Application()
    app.router.add_post("/api/v1/jobs", create)
    runner = web.AppRunner(app, keepalive_timeout=0.3)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_posts_keep_their_connection_and_read_each_answer(
    server: tuple[str, list[tuple[str, bytes, str]]],
) -> None:
    url, seen = server
    client = LeanClient(url, {"Authorization": "Bearer t"}, connections=2)
    try:
        answers = [await client.post("/api/v1/jobs", b'{"i":%d}' % i) for i in range(3)]
        assert [(a.status, a.body) for a in answers] == [(201, b'{"n": %d}' % n) for n in (1, 2, 3)]
        assert [(auth, body) for auth, body, _ in seen] == [
            ("Bearer t", b'{"i":%d}' % i) for i in range(3)
        ]
        assert len({peer for _, _, peer in seen}) == 1  # one kept-alive connection
        # The server closes an idle connection: the next post opens another.
        await asyncio.sleep(0.6)
        again = await client.post("/api/v1/jobs", b"{}")
        assert again.status == 201 and seen[-1][2] != seen[0][2]
    finally:
        await client.close()
