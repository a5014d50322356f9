"""Sustained load through the API: jobs created at a steady rate, each due a
few seconds after its creation.

``python -m benchmarks.sustained [--rate 116] [--duration 60] [--batch N] …``

The design's average load is 10 M jobs a day, about 116 per second. This
starts the shards, the workers and the API (``vakit api``), POSTs jobs to
``/api/v1/jobs`` open-loop (request *i* is due at ``i / rate`` seconds whatever
the API's latency; a bounded number are in flight, the rest queue, and their
latency counts from when they were due, so a slow API cannot hide its
slowness by slowing the load down), waits for the jobs to run, and reports
start lateness from the database and API latency. With ``--batch N`` the same
rate goes through ``POST /api/v1/jobs:batch``, N jobs per request (request
*i* due at ``i * N / rate``). Same report format as the wave
(``report.json``, ``sustained.png``).

Here ``--batch`` is the create batch; the workers' claim batch is
``--claim-batch``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import secrets
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import uvloop

from benchmarks.apiload import JOBS, batch_supported
from benchmarks.harness import BenchCluster, ClusterSpec, ProcessSampler, bench_main, new_run
from benchmarks.leanhttp import HttpError, LeanClient
from benchmarks.options import add_cluster_options, cluster_spec, run_settings, settings_in_effect
from benchmarks.outcomes import collect, figures, server_info
from benchmarks.progress import Progress
from benchmarks.report import headline, machine_info, plot_timeline, write_report
from benchmarks.stats import summarize, timeline

__all__ = ["LoadResult", "SustainedOptions", "generate_load", "main", "run"]

log = logging.getLogger("benchmarks.sustained")


@dataclass
class SustainedOptions:
    cluster: ClusterSpec
    rate: float = 116.0
    duration: float = 60.0
    target: str = "noop"
    ahead: float = 5.0  # runAt = now + ahead, at the moment of the POST
    concurrency: int = 64  # requests in flight at most
    drain_timeout: float = 120.0
    batch: int | None = None  # jobs per POST /api/v1/jobs:batch; None: single creates
    api_procs: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoadResult:
    requested: int = 0  # jobs asked for
    created: int = 0
    statuses: Counter[str] = field(default_factory=Counter)  # per job
    requests: int = 0
    latency: list[float] = field(default_factory=list)  # per request, from when it was due
    service: list[float] = field(default_factory=list)  # per request, from when it was sent
    seconds: float = 0.0


async def generate_load(
    urls: str | list[str],
    token: str,
    body_for: Any,
    *,
    rate: float,
    duration: float,
    concurrency: int,
    batch: int | None = None,
) -> LoadResult:
    """POST ``rate`` jobs per second for ``duration`` seconds, open-loop:
    one job per ``POST /api/v1/jobs``, or ``batch`` per ``POST
    /api/v1/jobs:batch``; requests take the API processes in turn."""
    urls = [urls] if isinstance(urls, str) else urls
    result = LoadResult()
    total = int(rate * duration)
    per_request = batch or 1
    gate = asyncio.Semaphore(concurrency)
    loop = asyncio.get_running_loop()
    headers = {"Authorization": f"Bearer {token}"}
    # The lean client (benchmarks/leanhttp.py): the load generator's own CPU
    # is taken from the machine the API runs on.
    clients = [LeanClient(url, headers, connections=concurrency) for url in urls]
    # Printed whatever the verbosity, for the whole --duration.
    progress = Progress("jobs answered", total)

    async def one(client: LeanClient, due: float, count: int) -> None:
        async with gate:
            sent = loop.time()
            statuses: list[str] = []
            try:
                if batch is None:
                    r = await client.post("/api/v1/jobs", orjson.dumps(body_for()))
                    statuses.append(str(r.status))
                else:
                    body = orjson.dumps({"jobs": [body_for() for _ in range(count)]})
                    r = await client.post("/api/v1/jobs:batch", body)
                    if r.status == 200:
                        answer = orjson.loads(r.body)
                        statuses += [str(i["status"]) for i in answer["results"]]
                        statuses += ["no result"] * (count - len(answer["results"]))
                    else:
                        statuses += [str(r.status)] * count
            except (OSError, HttpError, TimeoutError) as exc:
                statuses += [type(exc).__name__] * (count - len(statuses))
            done = loop.time()
        result.statuses.update(statuses)
        result.created += statuses.count("201")
        result.latency.append(done - due)
        result.service.append(done - sent)
        progress.update(sum(result.statuses.values()))

    if batch is not None and not await batch_supported(urls[0], token, JOBS):
        raise RuntimeError("--batch: the API has no POST /api/v1/jobs:batch")
    try:
        start = loop.time()
        tasks = []
        for i, first in enumerate(range(0, total, per_request)):
            count = min(per_request, total - first)
            due = start + first / rate
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(clients[i % len(clients)], due, count)))
            result.requested += count
            result.requests += 1
        await asyncio.gather(*tasks)
        result.seconds = loop.time() - start
        progress.close()
    finally:
        for client in clients:
            await client.close()
    return result


def run(opts: SustainedOptions) -> dict[str, Any]:
    """Run one sustained load; returns the report (also written to ``report.json``)."""
    spec = opts.cluster
    run_id, owner = new_run()
    out = spec.out
    machine = machine_info()  # before the run: its load average is the noise floor
    with BenchCluster(spec) as cluster:
        dsns, target = cluster.start_scheduler(opts.target)
        token = secrets.token_urlsafe(18)
        urls = cluster.start_apis({token: owner}, opts.api_procs)
        worker_settings = settings_in_effect(cluster.base_env())

        def body() -> dict[str, Any]:
            run_at = datetime.now(UTC) + timedelta(seconds=opts.ahead)
            return {
                "type": "bench.sustained",
                "runAt": run_at.isoformat(),
                "target": target,
                "payload": {},
                "maxAttempts": 3,
                "timeoutSeconds": 30,
            }

        with ProcessSampler(cluster) as sampler:
            cluster.reset_statement_stats()
            sampler.begin()
            load = uvloop.run(
                generate_load(
                    urls,
                    token,
                    body,
                    rate=opts.rate,
                    duration=opts.duration,
                    concurrency=opts.concurrency,
                    batch=opts.batch,
                )
            )
            log.info(
                "%d of %d requests created a job in %.1f s",
                load.created,
                load.requested,
                load.seconds,
            )
            time.sleep(opts.ahead)
            seen = cluster.wait_finished(load.created, timeout=opts.drain_timeout)
            usage = sampler.end()
            log.info("%d of %d jobs finished", seen, load.created)
        counters = cluster.worker_counters()
        statements = cluster.statement_stats()
        cluster.stop_processes()
        outcomes = collect(dsns, owner)
        pg = server_info(dsns[0])
    origin = min(outcomes.scheduled, default=time.time())
    figs = figures(outcomes, load.created, origin)
    series = timeline(origin, outcomes.start_times(), outcomes.lateness(), outcomes.finished)
    report: dict[str, Any] = {
        # No ceiling: the wave measures it.
        **headline("sustained", load.created, figs, None, sampler.peak_rss()),
        "api_latency_seconds": summarize(load.latency),
        "api_service_seconds": summarize(load.service),
        "api": {
            "mode": "single" if opts.batch is None else "batch",
            "batch": opts.batch or 1,
            "api_processes": len(urls),
            "requested": load.requested,
            "requests": load.requests,
            "created": load.created,
            "statuses": dict(load.statuses),
            "achieved_rate": round(load.requested / load.seconds, 2) if load.seconds else None,
            # API CPU per created job over the whole run (the API does
            # nothing else here).
            "api_cpu_us_per_job": (usage.as_dict(load.created)["cpu_us_per_job"] or {}).get("api"),
        },
        "counts": outcomes.counts(),
        "retried_jobs": figs["retried_jobs"],
        "usage": usage.as_dict(load.created),
        "worker_counters": counters,
        "pg_top_statements": statements,
        "settings": {
            "source": "api" if opts.batch is None else f"api:batch({opts.batch})",
            "rate": opts.rate,
            "duration_seconds": opts.duration,
            "ahead_seconds": opts.ahead,
            "concurrency": opts.concurrency,
            "shards": len(dsns),
            "workers": spec.workers,
            "target": opts.target,
            "finished_seen_by_metrics": seen,
            **run_settings(spec, worker_settings, pg, machine, run_id, opts.extra),
        },
    }
    write_report(out, report)
    plot_timeline(
        out / "sustained.png",
        series,
        f"Sustained ({report['settings']['source']}, {report['settings']['db']}, "
        f"knobs: {report['settings']['knobs']}): {opts.rate:g} jobs/s for {opts.duration:g} s, "
        f"{len(dsns)} shards, {spec.workers} workers, {machine['cores']} cores",
        "the first runAt",
    )
    return report


def parse_args(argv: list[str] | None) -> tuple[SustainedOptions, bool]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sustained", description=__doc__.split("\n\n")[0]
    )
    add_cluster_options(
        parser, default_out="bench-out/sustained", claim_batch_flags=("--claim-batch",)
    )
    parser.add_argument("--rate", type=float, default=116.0, help="jobs created per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--ahead", type=float, default=5.0, help="runAt = now + this")
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight at most")
    parser.add_argument("--drain-timeout", type=float, default=120.0)
    parser.add_argument(
        "--batch",
        type=int,
        help="create through POST /api/v1/jobs:batch, this many jobs per request "
        "(default: one POST /api/v1/jobs per job)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args(argv)
    opts = SustainedOptions(
        cluster=cluster_spec(args),
        rate=args.rate,
        duration=args.duration,
        target=args.target,
        ahead=args.ahead,
        concurrency=args.concurrency,
        drain_timeout=args.drain_timeout,
        batch=args.batch,
        api_procs=args.api_procs,
    )
    if opts.batch is not None and not 1 <= opts.batch <= 1000:
        parser.error("--batch must be 1..1000")
    return opts, args.verbose


def main(argv: list[str] | None = None) -> int:
    return bench_main("sustained", argv, parse_args, run)


if __name__ == "__main__":
    sys.exit(main())
