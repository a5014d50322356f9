"""The floor under a single create's API CPU on this machine: what uvicorn
alone costs per request, and uvicorn plus one INSERT through psycopg's
async pool, at the sustained benchmark's rate, driven by its load client.

Vakit's single create is one HTTP request and (at most) one statement; no
code of ours runs in either app here. Compare ``cpu/job api`` in
``benchmarks.sustained`` with these figures, taken at the same rate on the
same machine::

    python -m benchmarks.floor --dsn postgresql://postgres@127.0.0.1:5432/postgres

The INSERT goes to a scratch table ``bench_floor`` (created and dropped
here) with a job row's kinds of values: a uuid, text, a timestamptz, two
jsonb documents. Prints one line per app; writes nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import psutil

from benchmarks.leanhttp import LeanClient

BODY = b'{"jobId":"job_01M8R2M5RNEQ0TDPA5BGH9EKMW","status":"SCHEDULED"}'
REQUEST = b'{"type":"x","runAt":"2026-12-01T10:00:00Z","target":{"kind":"NOOP"},"payload":{"n":1}}'
TABLE = (
    "CREATE TABLE IF NOT EXISTS bench_floor (id uuid PRIMARY KEY, owner text, type text, "
    "run_at timestamptz, target jsonb, payload jsonb)"
)
INSERT = (
    "INSERT INTO bench_floor VALUES (%(id)s, %(owner)s, %(type)s, %(run_at)s, %(target)s, %(payload)s)"
)


def make_app(mode: str, dsn: str) -> Any:
    """The ASGI app the server process runs: ``bare`` answers at once,
    ``insert`` writes one row first."""
    from psycopg.types.json import Jsonb
    from psycopg_pool import AsyncConnectionPool

    pool: AsyncConnectionPool | None = None
    head = {
        "type": "http.response.start",
        "status": 201,
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(BODY))],
    }

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal pool
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            if pool is not None:
                await pool.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        await receive()
        if mode == "insert":
            if pool is None:
                pool = AsyncConnectionPool(dsn, min_size=4, max_size=8, open=False, kwargs={"autocommit": True})
                await pool.open()
            row = {"id": uuid.uuid4(), "owner": "o", "type": "x", "run_at": datetime.now(UTC),
                   "target": Jsonb({"kind": "NOOP"}), "payload": Jsonb({"n": 1})}  # fmt: skip
            async with pool.connection() as conn:
                await conn.execute(INSERT, row, prepare=True)
        await send(head)
        await send({"type": "http.response.body", "body": BODY})

    return app


def serve(mode: str, dsn: str, port: int) -> None:
    import uvicorn

    uvicorn.run(make_app(mode, dsn), host="127.0.0.1", port=port, http="httptools", loop="uvloop",
                log_config=None, access_log=False)  # fmt: skip


async def drive(port: int, server: psutil.Process, rate: float, seconds: float) -> tuple[float, float]:
    """Requests at ``rate`` for ``seconds`` (open loop, as benchmarks.sustained);
    the server's user and system CPU per request after a 2 s warm-up."""
    client = LeanClient(f"http://127.0.0.1:{port}", {}, connections=64)
    total = int(rate * (seconds + 2))
    start = time.perf_counter()
    tasks = []
    before: Any = None
    for i in range(total):
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        if i == int(rate * 2):
            before, first = server.cpu_times(), i
        tasks.append(asyncio.create_task(client.post("/", REQUEST)))
    answers = await asyncio.gather(*tasks)
    after = server.cpu_times()
    failed = sum(1 for answer in answers if answer.status != 201)
    if failed:
        raise SystemExit(f"{failed} of {total} requests were not answered 201")
    n = total - first
    return (after.user - before.user) / n, (after.system - before.system) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="a running PostgreSQL (for the insert app)")
    parser.add_argument("--rate", type=float, default=1160.0, help="requests a second")
    parser.add_argument("--duration", type=float, default=12.0, help="seconds measured")
    parser.add_argument("--port", type=int, default=18999)
    parser.add_argument("--serve", choices=["bare", "insert"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.dsn, args.port)
        return
    import psycopg
    import uvloop

    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(TABLE)
    try:
        for mode in ("bare", "insert"):
            proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.floor", "--dsn", args.dsn, "--port", str(args.port),
                 "--serve", mode], env=os.environ.copy(),
            )  # fmt: skip
            try:
                time.sleep(2.0)
                user, system = uvloop.run(drive(args.port, psutil.Process(proc.pid), args.rate, args.duration))
            finally:
                proc.terminate()
                proc.wait(10)
            print(
                f"floor[{mode}] rate={args.rate:,.0f}/s server cpu/request: "
                f"{1e6 * (user + system):.0f} us (user {1e6 * user:.0f}, system {1e6 * system:.0f})"
            )
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS bench_floor")


if __name__ == "__main__":
    main()
