"""Issue 43's table of HTTP clients: CPU and memory per firing, one client
per process, against the benchmarks' sink (benchmarks/sink.py) on loopback.

    .venv/bin/python docs/results/issue43_clients.py --firings 20000 [--client NAME ...]

Each client fires ``--firings`` firings of the wave's shape at once (one task
each, as the timing wheel starts an instant), with at most 200 connections,
and the process reports CPU (user + system, all its threads) per firing and
the RSS it grew by. ``aiohttp`` is the HTTP target as it was before issue 43
(``git show e9d405a:cluster/targets/http.py``, copied to ``--old``), ``lean``
the target as it is now; the others fire the same request (body and
headers) through another client (pyreqwest is no dependency of Vakit:
``uv pip install pyreqwest`` for its row). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import shardmap  # noqa: E402
from cluster.instants import format_instant  # noqa: E402
from cluster.targets import firing_body, idempotency_key  # noqa: E402
from cluster.targets.policy import AddressPolicy  # noqa: E402
from tests.helpers import claimed_job  # noqa: E402

POLICY = AddressPolicy(allow_private=True)
POOL = 200


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _headers(job: Any, job_id: str) -> tuple[bytes, dict[str, str]]:
    sf = format_instant(job.scheduled_for)
    body = firing_body(job, job_id, sf)
    key = idempotency_key(job, job_id, sf)
    return body, {
        "Content-Type": "application/json",
        "Idempotency-Key": key,
        "Vakit-Job-Id": job_id,
        "Vakit-Scheduled-For": sf,
        "Vakit-Attempt": str(job.attempt),
        "webhook-id": key,
        "webhook-timestamp": str(int(time.time())),
        "User-Agent": "vakit-worker/0.1",
    }


async def _target(module: Any) -> tuple[Callable[[Any, str], Awaitable[bool]], Any]:
    target = module.HttpTarget(POLICY, POOL)

    async def fire(job: Any, job_id: str) -> bool:
        return bool((await target.fire(job, job_id, 30.0)).ok)

    return fire, target.close


async def client_aiohttp(old: Path) -> Any:
    spec = importlib.util.spec_from_file_location("old_http_target", old)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return await _target(module)


async def client_lean(old: Path) -> Any:
    from cluster.targets import http

    return await _target(http)


async def client_aiohttp_tuned(old: Path) -> Any:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=POOL, ttl_dns_cache=30)
    session = aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent"),
        trust_env=False,
        auto_decompress=False,
    )
    timeout = aiohttp.ClientTimeout(total=30)

    async def fire(job: Any, job_id: str) -> bool:
        body, headers = _headers(job, job_id)
        async with session.post(
            job.target["url"], data=body, headers=headers, allow_redirects=False, timeout=timeout
        ) as resp:
            return 200 <= resp.status < 300

    return fire, session.close


async def client_pyreqwest(old: Path) -> Any:
    from datetime import timedelta

    from pyreqwest.client import ClientBuilder

    client = (
        ClientBuilder()
        .max_connections(POOL)
        .follow_redirects(False)
        .timeout(timedelta(seconds=30))
        .no_proxy()
        .http1_only()
        .build()
    )

    async def fire(job: Any, job_id: str) -> bool:
        body, headers = _headers(job, job_id)
        resp = await client.post(job.target["url"]).headers(headers).body_bytes(body).build().send()
        return 200 <= resp.status < 300

    async def close() -> None:
        await client.close()

    return fire, close


CLIENTS = {
    "aiohttp": client_aiohttp,
    "aiohttp-tuned": client_aiohttp_tuned,
    "lean": client_lean,
    "pyreqwest": client_pyreqwest,
}


async def measure(name: str, url: str, firings: int, old: Path) -> dict[str, Any]:
    fire, close = await CLIENTS[name](old)
    jobs = [claimed_job({"kind": "HTTP", "url": url}, payload_json='{"n": 1}') for _ in range(firings)]
    ids = [shardmap.encode_id("job", j.id) for j in jobs]
    for j, i in zip(jobs[:200], ids[:200], strict=True):  # warm: connections open
        await fire(j, i)
    await asyncio.gather(*(fire(j, i) for j, i in zip(jobs[:400], ids[:400], strict=True)))
    rss0, peak = _rss(), 0
    ok = 0

    async def one(job: Any, job_id: str) -> None:
        nonlocal ok
        if await fire(job, job_id):
            ok += 1

    cpu0, wall0 = time.process_time(), time.perf_counter()
    tasks = [asyncio.create_task(one(j, i)) for j, i in zip(jobs, ids, strict=True)]
    while not all(t.done() for t in tasks[-1:]) or any(not t.done() for t in tasks[::500]):
        peak = max(peak, _rss())
        await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    peak = max(peak, _rss())
    await close()
    return {
        "client": name,
        "firings": firings,
        "ok": ok,
        "cpu_us_per_firing": round(cpu / firings * 1e6, 1),
        "firings_per_s": round(firings / wall),
        "rss_growth_bytes_per_firing": round((peak - rss0) / firings),
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--firings", type=int, default=20_000)
    parser.add_argument("--client", action="append", choices=sorted(CLIENTS))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--old", type=Path, default=Path("/tmp/i43/old/aiohttp_target.py"))
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(uvloop.run(measure(args.one, args.url, args.firings, args.old))))
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sink = subprocess.Popen([sys.executable, "-m", "benchmarks.sink", "--port", str(port)], cwd=ROOT)
    try:
        time.sleep(1.5)
        for _ in range(args.repeat):
            for name in args.client or list(CLIENTS):
                out = subprocess.run(
                    [sys.executable, __file__, "--one", name, "--url", f"http://127.0.0.1:{port}/fire",
                     "--firings", str(args.firings), "--old", str(args.old)],
                    capture_output=True, text=True, check=False,
                )  # fmt: skip
                print(out.stdout.strip() or out.stderr.strip()[-2000:], flush=True)
    finally:
        sink.terminate()
        sink.wait()


if __name__ == "__main__":
    main()
