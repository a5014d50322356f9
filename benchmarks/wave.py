"""The round-hour wave: J jobs all due at the same instant T.

``python -m benchmarks.wave [--jobs 100000] [--shards 2] [--workers 2] …``

Starts the shards and W worker processes, COPYs J jobs due at T (a lead time
ahead, long enough for the load and the prefetch window) straight into the
shards, lets the workers run them against the NOOP target or a local HTTP
sink, and then reads from the database when each job started and finished.
After the wave, on the same shards, it measures the raw SQL ceiling
(``benchmarks.ceiling``). Writes ``report.json`` and ``wave.png`` to ``--out``
and prints one summary line.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.bulk import JobSpec, copy_jobs
from benchmarks.ceiling import MODES, measure_ceiling
from benchmarks.harness import BenchCluster, ClusterSpec, ProcessSampler, bench_main, new_run
from benchmarks.options import add_cluster_options, cluster_spec, run_settings, settings_in_effect
from benchmarks.outcomes import collect, figures, server_info
from benchmarks.profile import summarize_profiles, write_summary
from benchmarks.report import headline, machine_info, plot_timeline, write_report
from benchmarks.stats import timeline

__all__ = ["WaveOptions", "auto_lead", "main", "run"]

log = logging.getLogger("benchmarks.wave")

# A conservative COPY rate (measured: ~150k rows/s on 2 cores) for a machine
# that is also running the shards and, maybe, other work.
_LOAD_RATE_GUESS = 50_000.0


@dataclass
class WaveOptions:
    cluster: ClusterSpec
    jobs: int = 100_000
    target: str = "noop"
    lead: float | None = None  # seconds from now to T; None: auto_lead()
    payload_bytes: int = 0
    ceiling: tuple[str, ...] = ("naive",)
    ceiling_rows: int | None = None  # None: min(jobs, 200k)
    ceiling_batch: int | None = None  # None: the claim batch the workers use
    drain_timeout: float | None = None  # None: scaled to the job count
    extra: dict[str, Any] = field(default_factory=dict)  # recorded in settings


def auto_lead(jobs: int, prefetch: float) -> float:
    """Time enough to load ``jobs`` rows before the first claim may take one."""
    return round(3.0 + prefetch + jobs / _LOAD_RATE_GUESS, 1)


def run(opts: WaveOptions) -> dict[str, Any]:
    """Run one wave; returns the report (also written to ``report.json``)."""
    spec = opts.cluster
    run_id, owner = new_run()
    out = spec.out
    machine = machine_info()  # before the run: its load average is the noise floor
    with BenchCluster(spec) as cluster:
        dsns, target = cluster.start_scheduler(opts.target)
        worker_settings = settings_in_effect(cluster.base_env())
        prefetch = float(worker_settings["prefetch_seconds"])
        lead = opts.lead if opts.lead is not None else auto_lead(opts.jobs, prefetch)
        with ProcessSampler(cluster) as sampler:
            t_due = datetime.now(UTC) + timedelta(seconds=lead)
            payload = {"pad": "x" * opts.payload_bytes} if opts.payload_bytes else {}
            job = JobSpec(
                owner=owner, type="bench.wave", run_at=t_due, target=target, payload=payload
            )
            load = copy_jobs(dsns, opts.jobs, job)
            loaded_at = datetime.now(UTC)
            log.info(
                "loaded %d jobs in %.1f s; T in %.1f s",
                load.total,
                load.seconds,
                (t_due - loaded_at).total_seconds(),
            )
            claims_open = t_due - timedelta(seconds=prefetch)
            late_load = (loaded_at - claims_open).total_seconds()
            if late_load > 0:
                log.warning(
                    "the load ended %.1f s after claims could start: raise --lead", late_load
                )
            # CPU is counted from the moment claims may start (T - prefetch).
            _sleep_until(claims_open, cluster)
            cluster.reset_statement_stats()
            cluster.start_profilers()
            sampler.begin()
            timeout = opts.drain_timeout or 120.0 + opts.jobs / 500.0
            _sleep_until(t_due, cluster)
            seen = cluster.wait_finished(load.total, timeout=timeout)
            usage = sampler.end()
            log.info("%d of %d jobs finished %.1f s after T", seen, load.total, usage.seconds)
        profiles = cluster.stop_profilers()
        profile = summarize_profiles(profiles) if profiles else None
        counters = cluster.worker_counters()
        statements = cluster.statement_stats()
        sink_count = cluster.sink_count() if opts.target == "http" else None
        # The ceiling runs with no scheduler at all: the workers would claim
        # the batched ceiling's rows, and poll (and use CPU) in any mode.
        cluster.stop_processes()
        outcomes = collect(dsns, owner)
        figs = figures(outcomes, load.total, t_due.timestamp())
        series = timeline(
            t_due.timestamp(), outcomes.start_times(), outcomes.lateness(), outcomes.finished
        )
        batch = opts.ceiling_batch or int(worker_settings["claim_batch"])
        ceilings = {
            mode: measure_ceiling(
                dsns,
                rows=opts.ceiling_rows or min(opts.jobs, 200_000),
                drivers=spec.workers,
                batch=batch,
                mode=mode,
                owner=f"{owner}-ceiling",
                log_dir=cluster.log_dir,
            )
            for mode in opts.ceiling
        }
        pg = server_info(dsns[0])
    naive = ceilings.get("naive")
    report: dict[str, Any] = {
        **headline(
            "wave", load.total, figs, naive.jobs_per_s if naive else None, sampler.peak_rss()
        ),
        "start_jobs_per_s": figs["start_jobs_per_s"],
        "drain_seconds": figs["drain_seconds"],
        "counts": outcomes.counts(),
        "retried_jobs": figs["retried_jobs"],
        "ceilings": {mode: c.as_dict() for mode, c in ceilings.items()},
        "usage": usage.as_dict(load.total),
        "worker_counters": counters,
        "sink_firings": sink_count,
        "pg_top_statements": statements,
        "worker_profile": profile,
        "settings": {
            "jobs": opts.jobs,
            "shards": len(dsns),
            "workers": spec.workers,
            "target": opts.target,
            "payload_bytes": opts.payload_bytes,
            "lead_seconds": lead,
            "due_at": t_due.isoformat(),
            "load_seconds": round(load.seconds, 3),
            "load_jobs_per_s": round(load.total / load.seconds, 1) if load.seconds else None,
            "load_per_shard": load.per_shard,
            "load_ended_after_claims_opened_seconds": round(max(0.0, late_load), 3),
            "finished_seen_by_metrics": seen,
            # The shards started here run with fsync off (PgServer durable=False).
            "durable": False if not spec.dsns else None,
            **run_settings(spec, worker_settings, pg, machine, run_id, opts.extra),
        },
    }
    write_report(out, report)
    if profile:
        write_summary(profile, out / "profile-summary.txt")
    plot_timeline(
        out / "wave.png",
        series,
        f"Wave: {load.total:,} jobs, {len(dsns)} shards, {spec.workers} workers, "
        f"{opts.target} target, {machine['cores']} cores",
        "T (runAt of every job)",
    )
    return report


def _sleep_until(when: datetime, cluster: BenchCluster) -> None:
    while True:
        left = (when - datetime.now(UTC)).total_seconds()
        if left <= 0:
            return
        cluster.check_alive()
        time.sleep(min(left, 0.5))


def parse_args(argv: list[str] | None) -> tuple[WaveOptions, bool]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.wave", description=__doc__.split("\n\n")[0]
    )
    add_cluster_options(parser, default_out="bench-out/wave")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--lead", type=float, help="seconds from now to T (default: from --jobs)")
    parser.add_argument("--payload-bytes", type=int, default=0, help="pad each payload")
    parser.add_argument(
        "--ceiling",
        choices=(*MODES, "both", "none"),
        default="naive",
        help="which raw SQL ceiling to measure after the wave",
    )
    parser.add_argument("--ceiling-rows", type=int, help="default min(jobs, 200000)")
    parser.add_argument("--drain-timeout", type=float, help="give up after this many seconds")
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args(argv)
    ceiling = {"both": MODES, "none": ()}.get(args.ceiling, (args.ceiling,))
    opts = WaveOptions(
        cluster=cluster_spec(args),
        jobs=args.jobs,
        target=args.target,
        lead=args.lead,
        payload_bytes=args.payload_bytes,
        ceiling=tuple(ceiling),
        ceiling_rows=args.ceiling_rows,
        drain_timeout=args.drain_timeout,
    )
    return opts, args.verbose


def main(argv: list[str] | None = None) -> int:
    return bench_main("wave", argv, parse_args, run)


if __name__ == "__main__":
    sys.exit(main())
