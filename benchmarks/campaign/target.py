"""The campaign's HTTP target: notes every firing, then answers.

Runs in its own process (``python -m benchmarks.campaign.target --port N
--record PATH``), outside every fault: it stands for the users' services,
and its record is the history of firings. A firing is written (and flushed)
before it is answered, so a firing the worker saw answered is on file.

It answers 503 while the firing's attempt is at most the payload's ``fail``
(the retries of the load), 200 otherwise. A job's tag and a cron's name
come back in the payload (``tag``, ``cron``).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from datetime import datetime
from pathlib import Path

from aiohttp import web

from benchmarks.campaign.history import Firing, Recorder

__all__ = ["main"]


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def app(recorder: Recorder) -> web.Application:
    async def fire(request: web.Request) -> web.Response:
        at = time.time()
        body = await request.json()
        payload = body.get("payload") or {}
        attempt = int(body["attempt"])
        status = 503 if attempt <= int(payload.get("fail", 0)) else 200
        recorder.add(
            Firing(
                at=at,
                job=str(body["jobId"]),
                attempt=attempt,
                scheduled_for=_epoch(body["scheduledFor"]),
                status=status,
                tag=payload.get("tag"),
                cron=payload.get("cron"),
            )
        )
        return web.Response(status=status)

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    application = web.Application()
    application.router.add_post("/fire", fire)
    application.router.add_get("/healthz", healthz)
    return application


async def serve(port: int, record: Path) -> None:
    recorder = Recorder(record)
    runner = web.AppRunner(app(recorder), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        recorder.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", type=Path, required=True)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.port, args.record))


if __name__ == "__main__":
    main()
