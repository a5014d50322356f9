"""Job search on a shard holding a million finished jobs: how long
``GET /api/v1/jobs?status=FAILED`` takes for a page.

Starts one PostgreSQL server (durable unless ``--no-durable``), migrates
it, makes the history's day partitions as the janitor does, COPYs
``--rows`` finished jobs into ``job_history`` (ten days of them; ``--failed``
of them FAILED, a few CANCELLED, the rest SUCCEEDED; nine in ten for the
owner searched, the rest for another), runs VACUUM ANALYZE, then times
pages through the whole API in process (FastAPI app, httpx ASGI transport,
the PostgreSQL store): the first page, and pages walked with the cursor.
The plan of one page is the store's own statement as the server ran it
(``auto_explain`` on the store's session), never a copy of its SQL.
Prints percentiles; asserts nothing about time.

    python -m benchmarks.search --rows 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
from psycopg.conninfo import make_conninfo

import shardmap
from benchmarks.sql import query
from cluster.config import Settings
from cluster.local import PgServer
from cluster.model import JobSearchParams, JobStatus, MaintainHistoryParams
from cluster.processes import api_app
from cluster.store import PgStore, migrate_shard

OWNER, OTHER = "tenant-a", "tenant-b"
DAYS = 10
_CHUNK = 50_000


def _lines(count: int, failed_share: float, now: datetime) -> list[str]:
    target = json.dumps({"kind": "HTTP", "url": "https://hooks.example.com/settle"})
    rnd = random.Random(7)
    start_ms = int((now - timedelta(days=DAYS)).timestamp() * 1000)
    span_ms = DAYS * 86_400_000 - 120_000
    out = []
    for _ in range(count):
        ms = start_ms + rnd.randrange(span_ms)
        created = datetime.fromtimestamp(ms / 1000, UTC)
        finished = created + timedelta(seconds=rnd.randrange(1, 60))
        draw = rnd.random()
        if draw < failed_share:
            status, attempt, error = "FAILED", 5, "HTTP 503 from target"
        elif draw < failed_share + 0.01:
            status, attempt, error = "CANCELLED", 0, "\\N"
        else:
            status, attempt, error = "SUCCEEDED", 1, "\\N"
        owner = OWNER if rnd.random() < 0.9 else OTHER
        when = created.isoformat()
        fields = [
            str(shardmap.new_uuid(0, unix_ms=ms)), owner, "SETTLE", when, when, status,
            str(attempt), "5", "30", "HTTP", target, '{"orderId":1}', error, when,
            finished.isoformat(),
        ]  # fmt: skip
        out.append("\t".join(fields) + "\n")
    return out


def load(dsn: str, rows: int, failed_share: float) -> float:
    started = time.monotonic()
    lines = _lines(rows, failed_share, datetime.now(UTC))
    with psycopg.connect(dsn) as conn:
        with conn.cursor() as cur, cur.copy(query("copy_history")) as copy:
            for i in range(0, len(lines), _CHUNK):
                copy.write("".join(lines[i : i + _CHUNK]))
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(query("vacuum_history"))
    return time.monotonic() - started


def _pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def measure(dsn: str, repeat: int, limit: int) -> None:
    settings = Settings(shards=[dsn], api_tokens={"t": OWNER})
    app = api_app(settings)
    headers = {"Authorization": "Bearer t"}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            for label, q in [
                ("status=FAILED, first page", "status=FAILED"),
                ("status=FAILED,CANCELLED, first page", "status=FAILED,CANCELLED"),
                ("no filter, first page", ""),
                ("status=FAILED&type=SETTLE, first page", "status=FAILED&type=SETTLE"),
            ]:
                samples = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    r = await client.get(f"/api/v1/jobs?{q}&limit={limit}", headers=headers)
                    samples.append((time.perf_counter() - t0) * 1000)
                    assert r.status_code == 200, r.text
                    assert len(r.json()["items"]) == limit
                _report(label, samples)
            samples, cursor = [], ""
            for _ in range(repeat):
                t0 = time.perf_counter()
                r = await client.get(
                    f"/api/v1/jobs?status=FAILED&limit={limit}&cursor={cursor}", headers=headers
                )
                samples.append((time.perf_counter() - t0) * 1000)
                cursor = r.json()["nextCursor"] or ""
            _report("status=FAILED, walking pages by cursor", samples)


async def measure_store(dsn: str, repeat: int, limit: int) -> None:
    """The store call alone (what the API awaits per shard), and where the
    database spends its time on one page."""
    store = PgStore([dsn], max_size=2, timeout=5.0)
    await store.open()
    try:
        # The floor on this machine now: a trivial statement through the same pool.
        floor = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            await store.schema_version(0)
            floor.append((time.perf_counter() - t0) * 1000)
        _report("store.schema_version (a trivial statement)", floor)
        params = JobSearchParams(OWNER, limit=limit, statuses=(JobStatus.FAILED,))
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            page = await store.search_jobs(0, params)
            samples.append((time.perf_counter() - t0) * 1000)
            assert len(page) == limit
        _report("store.search_jobs status=FAILED", samples)
    finally:
        await store.close()


# PostgreSQL's auto_explain, for this session only (a superuser's startup
# options): every statement it runs is logged with its EXPLAIN ANALYZE.
_AUTO_EXPLAIN = (
    "-c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=0 "
    "-c auto_explain.log_analyze=on -c auto_explain.log_buffers=on "
    "-c auto_explain.log_format=json"
)


def explain_search(dsn: str, limit: int, log_file: Path) -> None:
    """Print the plan of the statement the store runs for one status=FAILED
    page, as the server logged it: the store is asked through its contract,
    so this plan cannot drift from the search (nor need the store's SQL)."""
    params = JobSearchParams(OWNER, limit=limit, statuses=(JobStatus.FAILED,))
    before = log_file.stat().st_size if log_file.exists() else 0

    async def search_once() -> None:
        store = PgStore([make_conninfo(dsn, options=_AUTO_EXPLAIN)], max_size=1, timeout=5.0)
        await store.open()
        try:
            await store.search_jobs(0, params)
        finally:
            await store.close()

    asyncio.run(search_once())
    with open(log_file, errors="replace") as log:
        log.seek(before)
        text = log.read()
    plans = []
    decoder = json.JSONDecoder()
    # "duration: 1.234 ms  plan:" and the plan's JSON on the lines after.
    for found in re.finditer(r"duration: ([0-9.]+) ms\s+plan:\s*\{", text):
        plan, _ = decoder.raw_decode(text, found.end() - 1)
        if "job_history" in plan.get("Query Text", ""):
            plans.append((float(found[1]), plan["Plan"]))
    if not plans:
        raise RuntimeError(f"auto_explain logged no search plan in {log_file}")
    ms, top = plans[-1]
    # auto_explain plans the statement for these values (a custom plan); the
    # store reuses a generic one, so only the execution time is the store's.
    # auto_explain logs no planning time: the line has none.
    print(
        f"EXPLAIN ANALYZE status=FAILED (custom plan, auto_explain of the store's statement): "
        f"execution {ms:.2f} ms, buffers hit {top.get('Shared Hit Blocks', '?')}, "
        f"read {top.get('Shared Read Blocks', '?')}"
    )


def _report(label: str, ms: list[float]) -> None:
    print(
        f"{label:45s} n={len(ms):4d}  p50 {statistics.median(ms):6.2f} ms  "
        f"p95 {_pct(ms, 95):6.2f} ms  p99 {_pct(ms, 99):6.2f} ms  max {max(ms):6.2f} ms"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--failed", type=float, default=0.02, help="share of FAILED rows")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--no-durable", action="store_true")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="vakit-search-bench-"))
    base.chmod(0o755)
    server = PgServer(base / "shard0", durable=not args.no_durable)
    server.start()
    try:
        server.create_database("vakit")
        dsn = server.dsn_for("vakit")
        migrate_shard(dsn, 0)
        asyncio.run(_prepare(dsn))
        seconds = load(dsn, args.rows, args.failed)
        print(f"loaded {args.rows:,} history rows with COPY in {seconds:.1f} s (+ VACUUM ANALYZE)")
        with psycopg.connect(dsn) as conn:
            parts = conn.execute(query("history_partitions")).fetchone()
        print(f"job_history partitions: {parts[0] if parts else '?'}; page limit {args.limit}")
        asyncio.run(measure_store(dsn, args.repeat, args.limit))
        explain_search(dsn, args.limit, server.log_file)
        asyncio.run(measure(dsn, args.repeat, args.limit))
    finally:
        server.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)  # a million rows are 1.2 GB on disk


async def _prepare(dsn: str) -> None:
    """The janitor's day partitions, before the load: rows land in their day."""
    store = PgStore([dsn], max_size=2, timeout=5.0)
    await store.open()
    try:
        today = datetime.now(UTC).date()
        await store.maintain_history(
            0,
            MaintainHistoryParams(
                retention_days=30, today=today - timedelta(days=DAYS), days_ahead=DAYS + 2
            ),
        )
    finally:
        await store.close()


if __name__ == "__main__":
    main()
