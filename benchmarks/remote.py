"""A round-hour wave against a cluster that is already running, through its API.

``vakit-bench remote --api-url URL --token TOKEN --jobs 20000 [--prometheus-url URL]``

For a load tester aiming at a deployment: nothing is started but a receiver.
The harness creates J jobs due at one instant T through ``POST
/api/v1/jobs:batch`` (several requests in flight), each firing at an HTTP
target, then follows the drain and reports lateness two ways:

- **at the receiver** (the default target is a receiver this harness runs on
  ``--sink-host``; the cluster's workers must be able to reach it, and its
  address policy must allow it): arrival time minus ``Vakit-Scheduled-For``,
  per job, deduplicated by job id (firing is at least once);
- **from the cluster's own metrics**: ``vakit_job_start_lateness_seconds``,
  read from Prometheus (``--prometheus-url``: ``histogram_quantile`` over the
  increase during the run) or scraped from the workers' ``/metrics``
  (``--metrics-url``, repeatable: the buckets' increase, interpolated as
  ``histogram_quantile`` does). Buckets bound what this can resolve.

With ``--target-url`` (your own receiver), progress and the drain come from the
metrics, so ``--prometheus-url`` or ``--metrics-url`` is needed. Progress
(done/total, rate, ETA) is printed while creating and while draining. Writes
``report.json`` (with ``schema_version``) to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import re
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from benchmarks.progress import Progress
from benchmarks.report import machine_info, summary_line, write_report
from benchmarks.stats import summarize
from cluster.instants import format_instant, parse_instant

__all__ = ["RemoteOptions", "histogram_quantile", "main", "parse_buckets", "run"]

LATENESS = "vakit_job_start_lateness_seconds"
ON_TIME_SECONDS = 60.0


@dataclass
class RemoteOptions:
    api_url: str
    token: str
    jobs: int = 10_000
    batch: int = 500
    concurrency: int = 4
    lead: float | None = None
    target_url: str | None = None
    sink_host: str = "127.0.0.1"
    sink_port: int = 0
    prometheus_url: str | None = None
    metrics_urls: list[str] = field(default_factory=list)
    drain_timeout: float | None = None
    out: Path = Path("bench-out/remote")


# -- metrics -------------------------------------------------------------------

_BUCKET = re.compile(rf'^{LATENESS}_bucket\{{(?P<labels>[^}}]*)\}} (?P<value>\S+)', re.M)
_LE = re.compile(r'le="([^"]+)"')


def parse_buckets(text: str) -> dict[float, float]:
    """Cumulative lateness bucket counts from exposition text, summed over
    every label but ``le``."""
    out: dict[float, float] = {}
    for match in _BUCKET.finditer(text):
        le_match = _LE.search(match["labels"])
        if le_match is None:
            continue
        le = math.inf if le_match[1] == "+Inf" else float(le_match[1])
        out[le] = out.get(le, 0.0) + float(match["value"])
    return out


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus's ``histogram_quantile`` over cumulative ``buckets``: linear
    within the bucket the rank falls in; the highest finite bound past it."""
    ordered = sorted(buckets.items())
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            width = count - lower_count
            return lower_bound + (bound - lower_bound) * ((rank - lower_count) / width if width else 1.0)
        lower_bound, lower_count = bound, count
    return ordered[-1][0]


def _share_within(buckets: dict[float, float], limit: float, total: int) -> float | None:
    fitting = [count for bound, count in buckets.items() if bound <= limit]
    return max(fitting) / total if fitting and total else None


class MetricsSource:
    """The cluster's own counts: Prometheus, or the workers' /metrics."""

    def __init__(self, prometheus_url: str | None, metrics_urls: list[str]) -> None:
        self.prometheus_url = prometheus_url.rstrip("/") if prometheus_url else None
        self.metrics_urls = metrics_urls
        self.base_buckets: dict[float, float] = {}
        self.base_finished = 0.0
        self.started_at = time.time()

    @property
    def available(self) -> bool:
        return bool(self.prometheus_url or self.metrics_urls)

    def _promql(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        assert self.prometheus_url
        params = {"query": expr, **({"time": f"{at:.3f}"} if at else {})}
        url = f"{self.prometheus_url}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus refused {expr!r}: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def _scrape(self) -> str:
        texts = []
        for url in self.metrics_urls:
            with urllib.request.urlopen(url, timeout=10) as resp:
                texts.append(resp.read().decode())
        return "\n".join(texts)

    def finished(self) -> float:
        """Succeeded + failed jobs, all processes together."""
        if self.prometheus_url:
            rows = self._promql(
                "sum(vakit_jobs_succeeded_total) + (sum(vakit_jobs_failed_total) or vector(0))"
            )
            return float(rows[0]["value"][1]) if rows else 0.0
        text = self._scrape()
        total = 0.0
        for name in ("vakit_jobs_succeeded_total", "vakit_jobs_failed_total"):
            for match in re.finditer(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M):
                total += float(match[1])
        return total

    def _buckets(self) -> dict[float, float]:
        if self.prometheus_url:
            rows = self._promql(f"sum by (le) ({LATENESS}_bucket)")
            return {
                (math.inf if r["metric"]["le"] == "+Inf" else float(r["metric"]["le"])): float(r["value"][1])
                for r in rows
            }
        return parse_buckets(self._scrape())

    def mark(self) -> None:
        """The counts before the run: what the run adds is measured from here."""
        self.started_at = time.time()
        self.base_buckets = self._buckets()
        self.base_finished = self.finished()

    def run_finished(self) -> int:
        return int(self.finished() - self.base_finished)

    def lateness(self, expected: int, wait: float = 60.0) -> tuple[dict[float, float], str]:
        """The run's lateness buckets (cumulative): the counters now minus at
        :meth:`mark`, once they account for ``expected`` starts (Prometheus
        scrapes on its own schedule) or ``wait`` seconds have passed."""
        deadline = time.monotonic() + wait
        while True:
            now = self._buckets()
            run = {le: now[le] - self.base_buckets.get(le, 0.0) for le in now}
            if run.get(math.inf, 0.0) >= expected or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        source = "prometheus" if self.prometheus_url else "workers' /metrics"
        return run, f"{source}: counters after the run minus before"


# -- the receiver ------------------------------------------------------------------


class Receiver:
    """Answers every POST with 200 and notes when each job first arrived.

    In a process of its own (its CPU is not the harness's, and no GIL is
    shared with the progress loop); the count of distinct jobs is shared
    memory, the arrivals come back through a pipe when it stops."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.first: dict[str, tuple[float, float]] = {}  # job id -> (arrival, lateness)
        self.deliveries = 0
        ctx = multiprocessing.get_context("fork")
        self._count = ctx.Value("q", 0, lock=False)
        self._port = ctx.Value("i", 0, lock=False)
        self._ready = ctx.Event()
        self._stop = ctx.Event()
        self._parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=self._serve, args=(child,), name="receiver", daemon=True)

    def _serve(self, conn: Any) -> None:
        first: dict[str, tuple[float, float]] = {}
        deliveries = 0
        count = self._count

        async def fire(request: web.Request) -> web.Response:
            nonlocal deliveries
            now = time.time()
            await request.read()
            deliveries += 1
            job_id = request.headers.get("Vakit-Job-Id", "")
            if job_id not in first:
                scheduled = parse_instant(request.headers["Vakit-Scheduled-For"])
                first[job_id] = (now, now - scheduled.timestamp())
                count.value += 1
            return web.Response(status=200)

        async def serve() -> None:
            app = web.Application()
            app.router.add_post("/{tail:.*}", fire)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, self.host, self.port).start()
            self._port.value = runner.addresses[0][1]
            self._ready.set()
            # A multiprocessing event, not an asyncio one: the harness sets it.
            await asyncio.to_thread(self._stop.wait)
            await runner.cleanup()

        asyncio.run(serve())
        conn.send((first, deliveries))
        conn.close()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/fire"

    @property
    def received(self) -> int:
        """Distinct jobs received so far."""
        return int(self._count.value)

    def start(self) -> None:
        self._proc.start()
        if not self._ready.wait(10):
            raise RuntimeError("the receiver did not start")
        self.port = int(self._port.value)

    def stop(self) -> None:
        self._stop.set()
        if self._parent.poll(15):
            self.first, self.deliveries = self._parent.recv()
        self._proc.join(5)


# -- the run -----------------------------------------------------------------------------


async def _create(opts: RemoteOptions, target_url: str, run_at: datetime, run_id: str) -> tuple[int, float]:
    """Create ``opts.jobs`` jobs due at ``run_at``; returns (created, seconds)."""
    headers = {"Authorization": f"Bearer {opts.token}", "Content-Type": "application/json"}
    url = opts.api_url.rstrip("/") + "/api/v1/jobs:batch"
    when = format_instant(run_at)
    progress = Progress("jobs created", opts.jobs)
    created = 0
    throttled = 0
    chunks = [range(i, min(i + opts.batch, opts.jobs)) for i in range(0, opts.jobs, opts.batch)]
    queue: asyncio.Queue[range] = asyncio.Queue()
    for chunk in chunks:
        queue.put_nowait(chunk)
    started = time.monotonic()

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal created, throttled
        while not queue.empty():
            chunk = queue.get_nowait()
            body = {
                "jobs": [
                    {"type": "BENCH_REMOTE", "runAt": when, "target": {"kind": "HTTP", "url": target_url},
                     "payload": {"run": run_id, "n": n}, "maxAttempts": 3, "timeoutSeconds": 30,
                     "idempotencyKey": f"{run_id}-{n}"}
                    for n in chunk
                ]
            }  # fmt: skip
            give_up = time.monotonic() + 120
            while True:
                async with session.post(url, json=body, headers=headers) as resp:
                    text = await resp.text()
                    if resp.status == 200:
                        results = json.loads(text)["results"]
                        created += sum(1 for r in results if r.get("status") in (200, 201))
                        limited = [r for r in results if r.get("status") == 429]
                        if not limited:
                            break
                        # Some items were over the owner's rate: send the batch
                        # again (keyed: the created ones answer 200, nothing twice).
                        created -= sum(1 for r in results if r.get("status") in (200, 201))
                        wait = 1.0
                    elif resp.status in (429, 503) and time.monotonic() < give_up:
                        wait = float(resp.headers.get("Retry-After", "1"))
                    else:
                        raise RuntimeError(f"jobs:batch answered {resp.status}: {text[:300]}")
                throttled += 1
                await asyncio.sleep(wait)
            progress.update(created)

    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(opts.concurrency)))
    progress.close()
    if throttled:
        print(f"jobs created: {throttled} request(s) were throttled (429/503) and sent again", file=sys.stderr)
    return created, time.monotonic() - started


def _check_api(opts: RemoteOptions) -> None:
    req = urllib.request.Request(
        opts.api_url.rstrip("/") + "/api/v1/jobs/job_00000000000000000000000000",
        headers={"Authorization": f"Bearer {opts.token}"},
    )
    try:
        urllib.request.urlopen(req, timeout=10)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise SystemExit(f"remote: the API refused the token ({exc.code}): check --token") from exc
        # 404 (or 422 for an id of another form): the API answers and knows the token.
    except OSError as exc:
        raise SystemExit(f"remote: no API at {opts.api_url}: {exc}") from exc


def run(opts: RemoteOptions) -> dict[str, Any]:
    _check_api(opts)
    # Before the receiver and the load: the harness machine's hour, not the
    # run's (its yardstick; the cluster's machines are not ours to measure).
    machine = machine_info()
    metrics = MetricsSource(opts.prometheus_url, opts.metrics_urls)
    receiver: Receiver | None = None
    if opts.target_url is None:
        receiver = Receiver(opts.sink_host, opts.sink_port)
        receiver.start()
    elif not metrics.available:
        raise SystemExit("remote: with --target-url, give --prometheus-url or --metrics-url to follow the drain")
    target_url = opts.target_url or (receiver.url if receiver else "")
    run_id = f"r{int(time.time())}"
    try:
        if metrics.available:
            metrics.mark()
        lead = opts.lead if opts.lead is not None else 10.0 + opts.jobs / 1_000.0
        t = (datetime.now(UTC) + timedelta(seconds=lead)).replace(microsecond=0)
        created, create_seconds = asyncio.run(_create(opts, target_url, t, run_id))
        slack = (t - datetime.now(UTC)).total_seconds()
        if slack < 0:
            print(f"remote: creating took past T by {-slack:.1f} s: raise --lead", file=sys.stderr)
        time.sleep(max(0.0, slack))
        deadline = time.monotonic() + (opts.drain_timeout or 120.0 + opts.jobs / 200.0)
        progress = Progress("jobs fired", created)
        done = 0
        while done < created and time.monotonic() < deadline:
            done = receiver.received if receiver else metrics.run_finished()
            progress.update(done)
            time.sleep(0.25)
        progress.close()
        drain_end = time.time()
        buckets, source = metrics.lateness(created) if metrics.available else ({}, None)
    finally:
        if receiver is not None:
            receiver.stop()

    origin = t.timestamp()
    lateness: dict[str, float | None]
    if receiver is not None:
        arrivals = [a for a, _ in receiver.first.values()]
        late = [late for _, late in receiver.first.values()]
        lateness = summarize(late)
        within: float | None = sum(1 for x in late if x <= ON_TIME_SECONDS) / opts.jobs
        last = max(arrivals, default=None)
        drain: float | None = len(arrivals) / (last - origin) if last and last > origin else None
    else:
        lateness = {q: histogram_quantile(v, buckets) for q, v in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}
        lateness["max"] = None
        within = _share_within(buckets, ON_TIME_SECONDS, opts.jobs)
        drain = done / (drain_end - origin) if drain_end > origin else None
    from_metrics = None
    if buckets:
        count = max(buckets.values(), default=0.0)
        from_metrics = {
            "source": source,
            "count": count,
            **{q: histogram_quantile(v, buckets) for q, v in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))},
            "started_within_60s": _share_within(buckets, ON_TIME_SECONDS, opts.jobs),
        }
    return {
        "benchmark": "remote",
        "jobs": opts.jobs,
        "created": created,
        "started_within_60s": within,
        "lateness_seconds": lateness,
        "lateness_from_metrics": from_metrics,
        "drain_jobs_per_s": drain,
        "create_jobs_per_s": created / create_seconds if create_seconds else None,
        "ceiling_jobs_per_s": None,
        "peak_worker_rss_bytes": {},
        "deliveries": receiver.deliveries if receiver else None,
        "settings": {
            "source": "api", "db": "remote", "knobs": "remote",
            "api_url": opts.api_url, "target": "receiver" if receiver else opts.target_url,
            "batch": opts.batch, "concurrency": opts.concurrency, "lead_seconds": lead,
            "wave_at": t.isoformat(), "prometheus_url": opts.prometheus_url, "metrics_urls": opts.metrics_urls,
            "machine": machine,  # the harness's machine, not necessarily the cluster's
        },
    }  # fmt: skip


def parse_args(argv: list[str] | None) -> RemoteOptions:
    parser = argparse.ArgumentParser(
        prog="vakit-bench remote", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--api-url", required=True, help="the cluster's API, e.g. http://api:8080")
    parser.add_argument("--token", required=True, help="a tenant token of that API")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500, help="jobs per jobs:batch request")
    parser.add_argument("--concurrency", type=int, default=4, help="batch requests in flight")
    parser.add_argument("--lead", type=float, help="seconds from now to T (default 10 + jobs/1000)")
    parser.add_argument("--target-url", help="your receiver (default: one this harness runs)")
    parser.add_argument("--sink-host", default="127.0.0.1", help="where the harness's receiver listens")
    parser.add_argument("--sink-port", type=int, default=0)
    parser.add_argument("--prometheus-url", help="read lateness and progress from this Prometheus")
    parser.add_argument("--metrics-url", action="append", default=[], help="a worker's /metrics (repeat)")
    parser.add_argument("--drain-timeout", type=float)
    parser.add_argument("--out", type=Path, default=Path("bench-out/remote"))
    args = parser.parse_args(argv)
    return RemoteOptions(
        api_url=args.api_url, token=args.token, jobs=args.jobs, batch=args.batch,
        concurrency=args.concurrency, lead=args.lead, target_url=args.target_url,
        sink_host=args.sink_host, sink_port=args.sink_port, prometheus_url=args.prometheus_url,
        metrics_urls=args.metrics_url, drain_timeout=args.drain_timeout, out=args.out,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    try:
        report = run(opts)
    except KeyboardInterrupt:
        print("remote: interrupted", file=sys.stderr)
        return 130
    path = write_report(opts.out, report)
    print(summary_line("remote", report), flush=True)
    print(f"report: {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
