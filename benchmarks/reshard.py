"""Grow and shrink a loaded cluster, and audit every firing at the target.

``python -m benchmarks.reshard [--jobs 1000000] [--spread 10] [--crons 10000] [--rate 500] …``

Issue 42's benchmark. It starts a 2-shard cluster (durable PostgreSQL,
ZooKeeper, two workers, the API, an HTTP sink that notes every firing) and
a third PostgreSQL server that is not a shard yet. It loads the cluster
through the API: ``--jobs`` pending jobs due evenly over ``--spread``
minutes from ``--lead`` seconds after the load begins, and ``--crons``
crons ``* * * * *`` (batch creates), then keeps a steady stream of
``--rate`` single creates a second, each due ``--ahead`` s later, running
until ``--settle`` s after the last move. ``--settle`` s after the first
loaded job is due, it adds the third database as a shard (``POST
/api/v1/shards``, what ``vakit shards add`` calls), rebalances and waits
(``vakit shards rebalance --wait``), then drains shard ``--drain`` and
waits (``vakit shards drain N --wait``), timing each.

Then it waits until every loaded job's runAt has passed and nothing of the
run due up to then is still pending on any shard, stops the processes, and
audits at the target (benchmarks/firings.py): every job id the API said it
created arrived exactly once, and every cron arrived once for every whole
minute slot from the first after the crons were made to the last waited
for. It reports the move rate (rows copied over the seconds spent copying,
from the move record), the start lateness at the target of the jobs due
before, during and after the moves, the stream's API latency and 503 share
in the same windows, any other 5xx, and the audit. ``--no-moves`` runs the
same load with no move: the figures to set a run with moves against.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import secrets
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.apiload import CRONS, JOBS, create_items
from benchmarks.createstream import CreateStream, request_figures, status_series
from benchmarks.cronwave import slot_at_least
from benchmarks.firings import (
    audit_crons,
    audit_jobs,
    first_arrivals,
    lateness_by_window,
    read_firings,
)
from benchmarks.harness import BenchCluster, ClusterSpec, ProcessSampler, bench_main
from benchmarks.options import add_cluster_options, cluster_spec, run_settings, settings_in_effect
from benchmarks.outcomes import ON_TIME_SECONDS, server_info
from benchmarks.report import headline, machine_info, write_report
from benchmarks.reshardload import cron_body, job_body, sleep_until, wait_backlog
from benchmarks.reshardreport import reshard_line, write_markdown
from benchmarks.shardmoves import MoveResult, ShardsApi, epoch_seen, move_figures

__all__ = ["ReshardOptions", "main", "run"]

log = logging.getLogger("benchmarks.reshard")

# The mover's settings (VAKIT_RESHARD_*), reported with every run.
MOVER_SETTING_NAMES = (
    "reshard_batch_slots",
    "reshard_barrier_timeout",
    "reshard_wave_window",
    "reshard_wave_threshold",
)


@dataclass
class ReshardOptions:
    cluster: ClusterSpec
    jobs: int = 1_000_000
    spread: float = 10.0  # minutes over which the loaded jobs fall due
    crons: int = 10_000
    rate: float = 500.0  # stream creates a second
    ahead: float = 5.0  # a stream job's runAt: its create + this
    lead: float | None = None  # seconds from the load's start to the first loaded runAt
    settle: float = 60.0  # seconds of load before the first move and after the last
    drain: int | None = 0  # the shard drained after the rebalance; None: none
    moves: bool = True
    spare_dsn: str | None = None  # the database to add (default: a server started here)
    create_batch: int = 1000
    clients: int = 8
    concurrency: int = 64
    api_procs: int = 1
    move_timeout: float = 3600.0
    hold: float = 0.0  # with no moves: seconds of load where the moves would be
    drain_timeout: float = 900.0  # waiting for the backlog after the last runAt
    extra: dict[str, Any] = field(default_factory=dict)

    def default_lead(self) -> float:
        # The load's creation at conservative rates of this machine (jobs
        # 5,000/s, crons 1,000/s in batches), so the first jobs fall due
        # after it, plus a margin.
        return 5.0 + self.jobs / 5000 + self.crons / 1000


def run(opts: ReshardOptions) -> dict[str, Any]:
    spec = opts.cluster
    if opts.moves and not spec.zookeeper:
        raise SystemExit("moving slots needs ZooKeeper (the map and the move record live there)")
    if opts.moves and spec.dsns and not opts.spare_dsn:
        raise SystemExit("with --dsn, give the database to add with --spare-dsn")
    if opts.moves and not opts.spare_dsn:
        spec.spare_shards = 1
    run_id = secrets.token_hex(4)
    owner = f"bench-{run_id}"
    machine = machine_info()
    out = spec.out
    out.mkdir(parents=True, exist_ok=True)
    record_path = out / "firings.log"
    record_path.unlink(missing_ok=True)
    token, operator = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    with BenchCluster(spec) as cluster:
        dsns = cluster.start_shards()
        spare = opts.spare_dsn or (cluster.spare_dsns[0] if cluster.spare_dsns else None)
        if spec.zookeeper:
            cluster.start_zookeeper()
        target = {"kind": "HTTP", "url": cluster.start_sink(record=record_path)}
        cluster.start_workers()
        urls = cluster.start_apis({token: owner}, opts.api_procs, operators={operator: "bench"})
        worker_settings = settings_in_effect(cluster.base_env())
        shards_api = ShardsApi(urls[0], operator)
        expected: dict[str, str] = {}  # job id -> kind

        def accepted(_source: int, _index: int, item: dict[str, Any]) -> None:
            job_id = item.get("jobId") or item.get("id")
            if job_id:
                expected[job_id] = "bulk"

        with ProcessSampler(cluster) as sampler:
            load_mark = sampler.mark()
            load_start = time.time()
            lead = opts.lead if opts.lead is not None else opts.default_lead()
            first_due = datetime.fromtimestamp(load_start, UTC) + timedelta(seconds=lead)
            span = opts.spread * 60.0
            tag = secrets.token_hex(3)
            crons = asyncio.run(
                create_items(
                    urls,
                    [(token, opts.crons, lambda i: cron_body(target, tag, i))],
                    CRONS,
                    batch=opts.create_batch,
                    clients=opts.clients,
                )
            ) if opts.crons else None  # fmt: skip
            crons_made = datetime.now(UTC)
            bulk = asyncio.run(
                create_items(
                    urls,
                    [
                        (
                            token,
                            opts.jobs,
                            lambda i: job_body(
                                "bulk", first_due + timedelta(seconds=span * i / opts.jobs), target, i
                            ),
                        )
                    ],
                    JOBS,
                    batch=opts.create_batch,
                    clients=opts.clients,
                    on_accepted=accepted,
                )
            ) if opts.jobs else None  # fmt: skip
            load_usage = sampler.usage_since(load_mark)
            load_end = time.time()
            log.info(
                "loaded in %.1f s; first job due in %.1f s",
                load_end - load_start,
                first_due.timestamp() - load_end,
            )

            stream = CreateStream(
                urls,
                token,
                lambda n: job_body(
                    "stream", datetime.now(UTC) + timedelta(seconds=opts.ahead), target, n
                ),
                opts.rate,
                opts.concurrency,
            )
            stream.start()
            stream_start = time.time()
            moves: list[MoveResult] = []
            added: dict[str, Any] | None = None
            try:
                sleep_until(
                    max(first_due.timestamp(), stream_start) + opts.settle,
                    cluster,
                    "the first move",
                )
                moves_mark = sampler.mark()
                moves_start = time.time()
                if opts.moves and spare is not None:
                    began = time.time()
                    added = {**shards_api.add(spare), "seconds": round(time.time() - began, 3)}
                    moves.append(shards_api.move("rebalance", timeout=opts.move_timeout))
                    if opts.drain is not None:
                        moves.append(
                            shards_api.move("drain", opts.drain, timeout=opts.move_timeout)
                        )
                else:
                    # The control: the same load for as long as the moves took
                    # in the run compared with, so `during` has its twin.
                    sleep_until(moves_start + opts.hold, cluster, "the end of the held window")
                moves_end = time.time()
                moves_usage = sampler.usage_since(moves_mark)
                sleep_until(moves_end + opts.settle, cluster, "the stream's end")
            finally:
                requests = stream.stop()
            stream_end = time.time()
            for r in requests:
                if r.job_id:
                    expected[r.job_id] = "stream"
            last_due = max(
                first_due.timestamp() + span if opts.jobs else 0.0,
                stream_end + opts.ahead,
            )
            until = datetime.fromtimestamp(last_due, UTC)
            first_slot = slot_at_least(crons_made, 1.0) if opts.crons else None
            if first_slot is not None:
                # Every cron slot that has passed by then is audited: at
                # least the first after the crons were made.
                until = max(first_slot, until)
            all_dsns = dsns + ([spare] if added and spare else [])
            backlog = wait_backlog(cluster, all_dsns, owner, until, opts.drain_timeout)
            final_status = shards_api.status() if spec.zookeeper else None
            # The map each process routes by, against the one ZooKeeper holds.
            epochs = {
                **{f"api-{i}": epoch_seen(f"{u}/metrics", operator) for i, u in enumerate(urls)},
                # What an API routes creates by (its /api/v1/cluster), which
                # its gauge does not show when its own mover set the gauge.
                **{
                    f"api-{i} routes by": ShardsApi(u, operator)
                    .call("GET", "/api/v1/cluster")
                    .get("slotMap", {})
                    .get("epoch")
                    for i, u in enumerate(urls)
                },
                **{
                    f"worker-{i}": epoch_seen(f"http://127.0.0.1:{port}/metrics")
                    for i, port in enumerate(cluster.metrics_ports)
                },
            }
            sink_total = cluster.sink_count(flush=True)
        cluster.stop_processes()
        pg = server_info(dsns[0])

    firings = read_firings(record_path)
    slots: list[float] = []
    if first_slot is not None:
        s = first_slot
        while s <= until:
            slots.append(s.timestamp())
            s += timedelta(minutes=1)
    answers = {("stream", r.n): r.status for r in requests}
    jobs_audit = audit_jobs(expected, firings, answers)
    cron_audit = audit_crons(opts.crons, slots, firings) if opts.crons else None
    firsts = first_arrivals(firings)
    windows = {
        "before": (stream_start, moves_start),
        "during": (moves_start, moves_end),
        "after": (moves_end, until.timestamp() + 1),
    }
    for m in moves:
        windows[m.kind] = (m.started, m.ended)
    lateness = lateness_by_window(firsts, windows)
    api = {name: request_figures(requests, lo, hi) for name, (lo, hi) in windows.items()}
    move_figs = [move_figures(m) for m in moves]
    rows = sum(m["rows_copied"] for m in move_figs)
    copy_s = sum(m["copy_seconds"] for m in move_figs)
    jobs_copied = sum(m["jobs_copied"] for m in move_figs)
    mine = [f for f in firsts if f.job_id in expected]
    on_time = sum(1 for f in mine if f.received - f.scheduled_for <= ON_TIME_SECONDS)
    figs = {
        "started_within_60s": on_time / len(expected) if expected else None,
        "lateness_seconds": {k: v for k, v in lateness["during"]["all"].items() if k != "jobs"},
        "drain_jobs_per_s": None,
    }
    report: dict[str, Any] = {
        **headline("reshard", len(expected), figs, None, sampler.peak_rss()),
        "moves": {
            "added": added,
            "runs": move_figs,
            "seconds": round(moves_end - moves_start, 3),
            "rows_copied": rows,
            "jobs_copied": jobs_copied,
            "rows_per_copy_second": round(rows / copy_s, 1) if copy_s > 0 else None,
            "jobs_per_copy_second": round(jobs_copied / copy_s, 1) if copy_s > 0 else None,
            "final_status": final_status,
            "epoch_seen_by_process": epochs,
            "usage": moves_usage.as_dict(),
        },
        "lateness_by_window": lateness,
        "api_latency_seconds": api["during"]["latency_seconds"],
        "api_by_window": api,
        "api_errors_other_than_503": sum(a["errors_other_than_503"] for a in api.values() if a),
        # [second from the first move's start, requests, 503s, other errors]
        "api_status_per_second": status_series(requests, moves_start),
        "stream": {
            "requests": len(requests),
            "created": sum(1 for r in requests if r.job_id),
            "error_samples": stream.error_samples,
            "seconds": round(stream_end - stream_start, 1),
        },
        "load": {
            "crons": crons.as_dict(load_usage.cpu_seconds.get("api")) if crons else None,
            "jobs": bulk.as_dict(load_usage.cpu_seconds.get("api")) if bulk else None,
            "seconds": round(load_end - load_start, 1),
            "usage": load_usage.as_dict(),
        },
        "audit": {
            "jobs": jobs_audit,
            "crons": cron_audit,
            "exactly_once": jobs_audit["exactly_once"]
            and (cron_audit or {"exactly_once": True})["exactly_once"],
            "firings_recorded": len(firings),
            "sink_firings": sink_total,
            "backlog": backlog,
        },
        "settings": {
            "source": "api",
            "jobs": opts.jobs,
            "spread_minutes": opts.spread,
            "lead_seconds": round(lead, 1),
            "first_due": first_due.isoformat(),
            "crons": opts.crons,
            "stream_rate": opts.rate,
            "stream_ahead_seconds": opts.ahead,
            "stream_concurrency": opts.concurrency,
            "settle_seconds": opts.settle,
            "moves": opts.moves,
            "hold_seconds": None if opts.moves else opts.hold,
            "drain": opts.drain,
            "shards": len(dsns),
            "workers": spec.workers,
            "target": "http (recording sink)",
            "api_processes": len(urls),
            "create_batch": opts.create_batch,
            "create_clients": opts.clients,
            "mover": settings_in_effect(cluster.base_env(), MOVER_SETTING_NAMES),
            **run_settings(spec, worker_settings, pg, machine, run_id, opts.extra),
        },
    }
    write_report(out, report)
    write_markdown(out / "report.md", report)
    return report


def parse_args(argv: list[str] | None) -> tuple[ReshardOptions, bool]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.reshard", description=__doc__.split("\n\n")[0]
    )
    add_cluster_options(parser, default_out="bench-out/reshard")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="pending jobs loaded")
    parser.add_argument(
        "--spread", type=float, default=10.0, help="minutes the loaded jobs fall due over"
    )
    parser.add_argument("--crons", type=int, default=10_000, help="crons '* * * * *'")
    parser.add_argument("--rate", type=float, default=500.0, help="stream creates a second")
    parser.add_argument(
        "--ahead", type=float, default=5.0, help="a stream job's runAt = its create + this"
    )
    parser.add_argument(
        "--lead", type=float, help="seconds from the load's start to the first loaded runAt"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=60.0,
        help="seconds of load before the first move and after the last",
    )
    parser.add_argument(
        "--drain", type=int, default=0, help="the shard drained after the rebalance"
    )
    parser.add_argument("--no-drain", action="store_true", help="rebalance only")
    parser.add_argument(
        "--no-moves", action="store_true", help="the same load, no move (a baseline)"
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=0.0,
        help="with --no-moves: seconds of load in place of the moves (the `during` window)",
    )
    parser.add_argument("--spare-dsn", help="the database to add (default: a server started here)")
    parser.add_argument("--create-batch", type=int, default=1000, help="items per batch create")
    parser.add_argument("--clients", type=int, default=8, help="batch creates in flight")
    parser.add_argument(
        "--concurrency", type=int, default=64, help="stream requests in flight at most"
    )
    parser.add_argument(
        "--move-timeout", type=float, default=3600.0, help="cancel a move after this"
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=900.0, help="seconds to wait for the backlog"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args(argv)
    opts = ReshardOptions(
        cluster=cluster_spec(args),
        jobs=args.jobs,
        spread=args.spread,
        crons=args.crons,
        rate=args.rate,
        ahead=args.ahead,
        lead=args.lead,
        settle=args.settle,
        drain=None if args.no_drain else args.drain,
        moves=not args.no_moves,
        hold=args.hold,
        spare_dsn=args.spare_dsn,
        create_batch=args.create_batch,
        clients=args.clients,
        concurrency=args.concurrency,
        api_procs=args.api_procs,
        move_timeout=args.move_timeout,
        drain_timeout=args.drain_timeout,
    )
    return opts, args.verbose


def main(argv: list[str] | None = None) -> int:
    return bench_main("reshard", argv, parse_args, run, also=reshard_line)


if __name__ == "__main__":
    sys.exit(main())
