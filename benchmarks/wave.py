"""The round-hour wave: J jobs all due at the same instant T.

``python -m benchmarks.wave [--source copy|api|crons] [--jobs 100000] …``

Starts the shards and W worker processes and makes J jobs due at T (a lead
time ahead, long enough to make them and for the prefetch window), through
one of three doors (``--source``):

- ``copy`` (the default): COPY straight into the shards' ``jobs`` table, a
  side door that measures the workers alone: one owner's rows and no API
  process, unless ``--copy-as-doors`` (the front doors' owners, their rows
  interleaved as concurrent batches leave them, and the API processes
  running idle: the wave and the cluster a front door makes, the door
  itself left out; ``benchmarks.doors`` compares with this);
- ``api``: the batch create endpoint (``POST /api/v1/jobs:batch``) of the
  API processes started here, several requests in flight;
- ``crons``: J crons of several owners in several time zones, all next
  firing at T (a whole minute), created through ``POST
  /api/v1/cron-jobs:batch``; the workers' materializer makes the jobs.

The workers run them against the NOOP target or a local HTTP sink; then the
harness reads from the database when each job was created, started and
finished. After the wave, on the same shards, it measures the raw SQL ceiling
(``benchmarks.ceiling``). Writes ``report.json`` and ``wave.png`` to ``--out``
and prints one summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import secrets
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp

from benchmarks.apiload import CRONS, JOBS, CreateResult, ItemSource, batch_supported, create_items
from benchmarks.bulk import JobSpec, copy_jobs
from benchmarks.ceiling import MODES, measure_ceiling
from benchmarks.cronwave import (
    DEFAULT_ZONES,
    WAVE_CALENDAR,
    SlotWatch,
    cron_body_factory,
    holiday_calendar,
    occurrence_figures,
    slot_at_least,
    zone_schedules,
)
from benchmarks.harness import (
    BenchCluster,
    ClusterSpec,
    ProcessSampler,
    bench_main,
    new_run,
    wal_window,
)
from benchmarks.options import add_cluster_options, cluster_spec, run_settings, settings_in_effect
from benchmarks.outcomes import collect, figures, server_info
from benchmarks.profile import summarize_profiles, write_summary
from benchmarks.report import headline, machine_info, plot_timeline, write_report
from benchmarks.stats import timeline
from benchmarks.yardstick import SpeedProbe
from cluster.worker import LOOKAHEAD_SECONDS

__all__ = [
    "SOURCES",
    "WaveOptions",
    "auto_lead",
    "claim_window",
    "due_at",
    "main",
    "run",
    "schedule_wave",
]

log = logging.getLogger("benchmarks.wave")

SOURCES = ("copy", "api", "crons")

# Conservative rates for a machine that is also running the shards and,
# maybe, other work; they only set how far ahead T is when --lead is not
# given. COPY: measured ~150k rows/s on 2 cores. The API, on durable shards
# with the workers running (2026-11-30): jobs:batch ~3,000 jobs/s,
# cron-jobs:batch ~840 crons/s, single creates ~230/s.
_LOAD_RATE_GUESS = 50_000.0
_API_BATCH_RATE_GUESS = {"api": 2_000.0, "crons": 500.0}
_API_SINGLE_RATE_GUESS = 150.0
# Occurrences the materializer makes per second, all shards together, and
# how long it may wait before its next pass.
_MATERIALIZE_RATE_GUESS = 10_000.0
_MATERIALIZER_PASS = 5.0


@dataclass
class WaveOptions:
    cluster: ClusterSpec
    jobs: int = 100_000
    target: str = "noop"
    lead: float | None = None  # seconds from now to T; None: auto_lead()
    payload_bytes: int = 0
    # Sign every firing (webhook-* headers) with a secret per owner, as a
    # deployment that sets VAKIT_SIGNING_SECRETS does: its cost is in the
    # workers' CPU.
    sign: bool = False
    ceiling: tuple[str, ...] = ("naive",)
    ceiling_rows: int | None = None  # None: min(jobs, 200k)
    ceiling_batch: int | None = None  # None: the claim batch the workers use
    drain_timeout: float | None = None  # None: scaled to the job count
    source: str = "copy"  # one of SOURCES
    owners: int = 4  # api and crons: owner services (one API token each)
    create_batch: int = 1000  # api and crons: items per batch request
    clients: int = 8  # api and crons: requests in flight
    api_procs: int = 1  # api and crons: API processes
    # copy: --owners owners, rows in runs of a batch per shard, and the API
    # processes started and idle, as through the front doors.
    copy_as_doors: bool = False
    # copy and api: T at a whole minute, where a crons wave's always is (due_at).
    due_on_minute: bool = False
    zones: tuple[str, ...] = DEFAULT_ZONES  # crons
    calendar: bool = False  # crons: each follows a calendar (issue 45)
    # A CHECKPOINT on the shards once the wave's rows exist, before claims
    # open (see _checkpoint_before_claims); --no-checkpoint leaves it out.
    checkpoint: bool = True
    extra: dict[str, Any] = field(default_factory=dict)  # recorded in settings

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")

    @property
    def on_minute(self) -> bool:
        """Whether T falls on a whole minute: always for crons (a schedule
        names no finer instant), for the other doors when asked."""
        return self.due_on_minute or self.source == "crons"


def due_at(now: datetime, lead: float, *, on_minute: bool = False) -> datetime:
    """T for a wave made ``lead`` seconds from ``now``; with ``on_minute``,
    the first whole minute at least that far, as a cron's slot is.

    A doors comparison needs both waves at the same phase of the minute.
    The autovacuum launcher visits a shard's database once a minute, 60 s
    apart from the server's start, and such a visit (vacuuming the rows a
    drain has finished) costs the drain it falls in about a second of CPU
    a million jobs. Each run starts its own servers, so a whole-minute T
    lands at a random phase of that minute: the visit falls inside the
    drain in the share of the minute the drain lasts. T a fixed lead after
    the start lands at one phase in every run: the doors' COPY waves, due
    33 s after the cluster was up, drained in 18 s on 2026-12-07 and no
    visit fell inside any of the five, while one fell inside two of three
    crons drains (``benchmarks/README.md``). By the same arithmetic, a
    drain of 30 s or more would meet it every time (not measured)."""
    if on_minute:
        return slot_at_least(now, lead)
    return now + timedelta(seconds=lead)


def schedule_wave(opts: WaveOptions, default_lead: float) -> tuple[datetime, datetime, float]:
    """Now, T and the lead between them (0.1 s): ``--lead``, or the
    source's ``default_lead``, from now, on a whole minute where
    :attr:`WaveOptions.on_minute` says so."""
    now = datetime.now(UTC)
    t_due = due_at(now, opts.lead if opts.lead is not None else default_lead, on_minute=opts.on_minute)
    return now, t_due, round((t_due - now).total_seconds(), 1)


def claim_window(worker_settings: dict[str, Any]) -> float:
    """How long before T the workers may claim the wave's jobs: the prefetch
    window, or the preloader's lookahead when preloading is on (it is by
    default). The wave must be in the tables by then, as a real round hour's
    jobs are long before it, or the run measures a wave nobody saw coming."""
    window = float(worker_settings["prefetch_seconds"])
    if int(worker_settings.get("preload_memory_bytes", 0)) > 0:
        window = max(window, LOOKAHEAD_SECONDS)
    return window


def auto_lead(jobs: int, prefetch: float) -> float:
    """Time enough to load ``jobs`` rows before the first claim may take one."""
    return round(3.0 + prefetch + jobs / _LOAD_RATE_GUESS, 1)


def run(opts: WaveOptions) -> dict[str, Any]:
    """Run one wave; returns the report (also written to ``report.json``)."""
    spec = opts.cluster
    run_id, owner = new_run()
    out = spec.out
    machine = machine_info()  # before the run: its load average is the noise floor
    # The API doors spread the wave over several owners, as many teams'
    # services would; COPY writes one owner's rows unless it stands in for
    # a front door's wave.
    as_doors = opts.source != "copy" or opts.copy_as_doors
    owners = [f"{owner}-{k}" for k in range(opts.owners)] if as_doors else [owner]
    if opts.sign:
        spec.worker_env["VAKIT_SIGNING_SECRETS"] = json.dumps(
            {o: ["whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()] for o in owners}
        )
    with BenchCluster(spec) as cluster:
        dsns, target = cluster.start_scheduler(opts.target)
        worker_settings = settings_in_effect(cluster.base_env())
        prefetch = claim_window(worker_settings)
        tokens = {secrets.token_urlsafe(18): o for o in owners}
        urls = cluster.start_apis(tokens, opts.api_procs) if as_doors else []
        with ProcessSampler(cluster) as sampler, ExitStack() as watching:
            made = _make_wave(opts, cluster, sampler, dsns, target, owners, tokens, urls, prefetch)
            if made.watch is not None:
                watching.enter_context(made.watch)
            t_due = made.due
            loaded_at = datetime.now(UTC)
            claims_open = t_due - timedelta(seconds=prefetch)
            late_load = (loaded_at - claims_open).total_seconds()
            if late_load > 0:
                log.warning(
                    "the %s source ended %.1f s after claims could start: raise --lead",
                    opts.source,
                    late_load,
                )
            checkpointed = _checkpoint_before_claims(opts, cluster, made, claims_open)
            # CPU is counted from the moment claims may start (T - prefetch).
            _sleep_until(claims_open, cluster)
            cluster.reset_statement_stats()
            cluster.start_profilers()
            sampler.begin()
            # The machine's speed while the wave drains (benchmarks/yardstick.py).
            probe = SpeedProbe().start()
            watching.callback(probe.stop)  # also when the drain fails
            wal_before = cluster.wal_stats()
            timeout = opts.drain_timeout or 120.0 + opts.jobs / 500.0
            _sleep_until(t_due, cluster)
            if made.watch is not None:
                made.watch.wait(timeout=10.0)  # its last count, taken at T
            seen = cluster.wait_finished(made.expected, timeout=timeout)
            usage = sampler.end()
            speed = probe.stop()
            wal = wal_window(wal_before, cluster.wal_stats(), made.expected)
            log.info("%d of %d jobs finished %.1f s after T", seen, made.expected, usage.seconds)
        profiles = cluster.stop_profilers()
        profile = summarize_profiles(profiles) if profiles else None
        counters = cluster.worker_counters()
        statements = cluster.statement_stats()
        sink_count = cluster.sink_count() if opts.target == "http" else None
        sink = cluster.sink_stats() if opts.target == "http" else None
        # The ceiling runs with no scheduler at all: the workers would claim
        # the batched ceiling's rows, and poll (and use CPU) in any mode.
        cluster.stop_processes()
        outcomes = collect(dsns, owners)
        figs = figures(outcomes, made.expected, t_due.timestamp())
        series = timeline(
            t_due.timestamp(), outcomes.start_times(), outcomes.lateness(), outcomes.finished
        )
        occurrences = (
            occurrence_figures(dsns, owners, t_due, made.expected)
            if opts.source == "crons"
            else None
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
    t = t_due.timestamp()
    created = {
        "first_vs_due_seconds": round(min(outcomes.created) - t, 3) if outcomes.created else None,
        "last_vs_due_seconds": round(max(outcomes.created) - t, 3) if outcomes.created else None,
    }
    if occurrences is not None and made.watch is not None:
        occurrences["visible"] = made.watch.as_dict()
    report: dict[str, Any] = {
        **headline(
            "wave", made.expected, figs, naive.jobs_per_s if naive else None, sampler.peak_rss()
        ),
        "source": opts.source,
        "start_jobs_per_s": figs["start_jobs_per_s"],
        "drain_seconds": figs["drain_seconds"],
        "counts": outcomes.counts(),
        "retried_jobs": figs["retried_jobs"],
        # When the rows the wave ran were made (their created_at), against T.
        "rows_created": created,
        "create": made.create_report,
        "occurrences": occurrences,
        "ceilings": {mode: c.as_dict() for mode, c in ceilings.items()},
        "usage": {**usage.as_dict(made.expected), "cpu_speed": speed},
        "wal": wal,
        "worker_counters": counters,
        "sink_firings": sink_count,
        # Is the figure Vakit's or the sink's? Its answer latency, and how
        # much of a core it was busy during the drain (1.0: saturated).
        "sink": None
        if sink is None
        else {
            **sink,
            "cpu_busy_fraction": round(usage.cpu_seconds.get("sink", 0.0) / usage.seconds, 3)
            if usage.seconds
            else None,
        },
        "pg_top_statements": statements,
        "worker_profile": profile,
        "settings": {
            "source": opts.source,
            "jobs": opts.jobs,
            "shards": len(dsns),
            "workers": spec.workers,
            "target": opts.target,
            "payload_bytes": opts.payload_bytes,
            "signed": opts.sign,
            "lead_seconds": made.lead,
            "due_at": t_due.isoformat(),
            "owners": len(owners),
            "copy_as_doors": opts.copy_as_doors if opts.source == "copy" else None,
            "due_on_minute": opts.on_minute,
            "api_processes": len(urls),
            "load_seconds": round(made.seconds, 3),
            "load_jobs_per_s": round(made.expected / made.seconds, 1) if made.seconds else None,
            "load_per_shard": made.per_shard,
            "load_ended_after_claims_opened_seconds": round(max(0.0, late_load), 3),
            "finished_seen_by_metrics": seen,
            "checkpoint_before_claims": checkpointed,
            **made.settings,
            **run_settings(spec, worker_settings, pg, machine, run_id, opts.extra),
        },
    }
    write_report(out, report)
    if profile:
        write_summary(profile, out / "profile-summary.txt")
    plot_timeline(
        out / "wave.png",
        series,
        f"Wave ({opts.source}, {report['settings']['db']}, knobs: {report['settings']['knobs']}): "
        f"{made.expected:,} jobs, {len(dsns)} shards, {spec.workers} workers, "
        f"{opts.target} target, {machine['cores']} cores",
        "T (runAt of every job)",
    )
    return report


@dataclass
class _Made:
    """How the wave's jobs came to be: T, how many, and the door's figures."""

    due: datetime
    lead: float
    expected: int
    seconds: float  # making them: the COPY, or the API creation
    per_shard: list[int] | None = None
    create_report: dict[str, Any] | None = None
    watch: SlotWatch | None = None
    settings: dict[str, Any] = field(default_factory=dict)


def _make_wave(
    opts: WaveOptions,
    cluster: BenchCluster,
    sampler: ProcessSampler,
    dsns: list[str],
    target: dict[str, Any],
    owners: list[str],
    tokens: dict[str, str],
    urls: list[str],
    prefetch: float,
) -> _Made:
    payload = {"pad": "x" * opts.payload_bytes} if opts.payload_bytes else {}
    if opts.source == "copy":
        _, t_due, lead = schedule_wave(opts, auto_lead(opts.jobs, prefetch))
        job = JobSpec(
            owner=owners[0], type="bench.wave", run_at=t_due, target=target, payload=payload
        )
        # A door's concurrent batches leave each owner's rows in runs of
        # about a batch, split over the shards.
        run_rows = max(1, opts.create_batch // len(dsns))
        load = copy_jobs(dsns, opts.jobs, job, owners=owners, run=run_rows)
        log.info(
            "copy: loaded %d jobs in %.1f s; T in %.1f s",
            load.total,
            load.seconds,
            (t_due - datetime.now(UTC)).total_seconds(),
        )
        return _Made(t_due, lead, load.total, load.seconds, per_shard=load.per_shard)

    token_list = list(tokens)
    door = JOBS if opts.source == "api" else CRONS
    has_batch = asyncio.run(batch_supported(urls[0], token_list[0], door))
    create_guess = _API_BATCH_RATE_GUESS[opts.source] if has_batch else _API_SINGLE_RATE_GUESS
    counts = _split(opts.jobs, len(owners))
    watch: SlotWatch | None = None
    extra: dict[str, Any] = {
        "create_batch": opts.create_batch,
        "create_clients": opts.clients,
    }
    if opts.source == "api":
        _, t_due, lead = schedule_wave(opts, _api_lead(opts.jobs, prefetch, create_guess))
        run_at = t_due.isoformat()
        tag = secrets.token_hex(4)

        def job_factory(k: int) -> Any:
            def body(i: int) -> dict[str, Any]:
                return {
                    "type": "bench.wave",
                    "runAt": run_at,
                    "target": target,
                    "payload": payload,
                    "maxAttempts": 3,
                    "timeoutSeconds": 30,
                    # A resent item (after a 429) finds its first copy.
                    "idempotencyKey": f"wave-{tag}-{k}-{i}",
                }

            return body

        sources: list[ItemSource] = [
            (token, counts[k], job_factory(k)) for k, token in enumerate(token_list)
        ]
    else:
        now, t_due, lead = schedule_wave(opts, _cron_lead(opts.jobs, prefetch, create_guess))
        schedules = zone_schedules(t_due, opts.zones, now)
        tag = secrets.token_hex(4)
        follow: dict[str, Any] = {}
        if opts.calendar:
            calendar = holiday_calendar(t_due)
            asyncio.run(_create_calendars(urls[0], token_list, calendar))
            follow = {"calendar": WAVE_CALENDAR, "calendarPolicy": "NEXT_BUSINESS_DAY"}
            extra["calendar"] = {"excluded_days": len(calendar["excludeDates"]), **follow}
        sources = [
            (
                token,
                counts[k],
                cron_body_factory(
                    schedules,
                    target,
                    owner_index=k,
                    owners=len(owners),
                    name_prefix=f"wave-{tag}",
                    extra=follow,
                ),
            )
            for k, token in enumerate(token_list)
        ]
        extra["cron_schedules"] = schedules
    log.info(
        "%s: creating %d %s through %d API process(es); T in %.1f s",
        opts.source,
        opts.jobs,
        door.name,
        len(urls),
        (t_due - datetime.now(UTC)).total_seconds(),
    )
    mark = sampler.mark()
    result: CreateResult = asyncio.run(
        create_items(urls, sources, door, batch=opts.create_batch, clients=opts.clients)
    )
    create_usage = sampler.usage_since(mark)
    api_cpu = create_usage.cpu_seconds.get("api")
    create_report = {
        **result.as_dict(api_cpu),
        "usage": create_usage.as_dict(result.accepted or None),
    }
    log.info(
        "%s: %d of %d accepted in %.1f s (%s/s, %s mode); T in %.1f s",
        opts.source,
        result.accepted,
        result.requested,
        result.seconds,
        f"{result.items_per_s:,.0f}" if result.items_per_s else "-",
        result.mode,
        (t_due - datetime.now(UTC)).total_seconds(),
    )
    if result.accepted < result.requested:
        log.warning("%s: not every item was accepted: %s", opts.source, dict(result.statuses))
    if opts.source == "crons":
        ended = datetime.now(UTC)
        if ended >= t_due:
            # A cron created after T fires next tomorrow: there is no wave.
            raise RuntimeError(
                f"creating the crons ended {(ended - t_due).total_seconds():.1f} s after T: "
                "raise --lead"
            )
        # Started by the caller (a context manager), right away.
        watch = SlotWatch(dsns, owners, t_due, result.accepted, until=t_due)
    return _Made(
        t_due,
        lead,
        result.accepted,
        result.seconds,
        create_report=create_report,
        watch=watch,
        settings=extra,
    )


def _split(total: int, parts: int) -> list[int]:
    """``total`` items over ``parts`` owners, as evenly as they go."""
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


def _api_lead(jobs: int, prefetch: float, create_rate: float) -> float:
    """Time enough to create ``jobs`` through the API before claims may start."""
    return round(3.0 + prefetch + jobs / create_rate, 1)


def _cron_lead(crons: int, prefetch: float, create_rate: float) -> float:
    """Time enough to create ``crons`` and for the materializer to make their
    occurrences before claims may start (T is then rounded up to a minute)."""
    return round(
        3.0 + prefetch + crons / create_rate + _MATERIALIZER_PASS + crons / _MATERIALIZE_RATE_GUESS,
        1,
    )


def _checkpoint_before_claims(
    opts: WaveOptions, cluster: BenchCluster, made: _Made, claims_open: datetime
) -> dict[str, Any]:
    """A CHECKPOINT once the wave's rows exist, before claims open.

    A deployment writes a round hour's rows long before it, and a checkpoint
    (every checkpoint_timeout, 5 min by default) falls in between: the first
    change to each page after a checkpoint writes the whole page to the WAL,
    so the wave's claims and completions pay those full-page images. Rows
    COPYed seconds before T on a server started a minute before pay none,
    while the crons door, whose lead spans checkpoint_timeout, always did:
    1,000,000 COPYed jobs drained at 36,704 jobs/s with no checkpoint in
    between and 29,750 with one (tree 011b716). So every door gets one
    here, and the drains compare alike. For crons it waits until the slot's
    occurrences are all visible (the materializer writes them on its own
    time), and is left out, and said so, when they come too late for it.
    """
    if not opts.checkpoint:
        return {"done": False, "why": "--no-checkpoint"}
    if made.watch is not None:
        made.watch.wait(timeout=max(0.0, (claims_open - datetime.now(UTC)).total_seconds() - 5.0))
        if made.watch.seen_all_at is None:
            log.warning("the slot's occurrences were not all visible in time: no checkpoint before claims")
            return {"done": False, "why": "occurrences not all visible 5 s before claims opened"}
    seconds = cluster.checkpoint()
    ended = (datetime.now(UTC) - claims_open).total_seconds()
    if ended > 0:
        log.warning("the checkpoint ended %.1f s after claims could start: raise --lead", ended)
    return {"done": True, "seconds": round(seconds, 3), "ended_vs_claims_open_seconds": round(ended, 3)}


def _sleep_until(when: datetime, cluster: BenchCluster) -> None:
    while True:
        left = (when - datetime.now(UTC)).total_seconds()
        if left <= 0:
            return
        cluster.check_alive()
        time.sleep(min(left, 0.5))


async def _create_calendars(url: str, tokens: list[str], body: dict[str, Any]) -> None:
    """Each owner's calendar for --calendar, through the API (201, or 200 if
    it is there already with these days)."""
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for token in tokens:
            headers = {"Authorization": f"Bearer {token}"}
            async with session.post(url + "/api/v1/calendars", json=body, headers=headers) as r:
                if r.status not in (200, 201):
                    raise RuntimeError(f"creating the wave's calendar: {r.status} {await r.text()}")


def parse_args(argv: list[str] | None) -> tuple[WaveOptions, bool]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.wave", description=__doc__.split("\n\n")[0]
    )
    add_cluster_options(parser, default_out="bench-out/wave")
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default="copy",
        help="how the wave's jobs are made: COPY into the shards, the batch create API, "
        "or crons that the materializer turns into jobs",
    )
    parser.add_argument(
        "--jobs", type=int, default=100_000, help="jobs (crons with --source crons)"
    )
    parser.add_argument(
        "--lead",
        type=float,
        help="seconds from now to T (default: from --jobs and --source); "
        "crons: at least this, rounded up to a whole minute",
    )
    parser.add_argument(
        "--owners",
        type=int,
        default=4,
        help="api/crons (and copy with --copy-as-doors): owner services, one API token each",
    )
    parser.add_argument(
        "--create-batch", type=int, default=1000, help="api/crons: items per batch request"
    )
    parser.add_argument(
        "--clients", type=int, default=8, help="api/crons: create requests in flight at most"
    )
    parser.add_argument(
        "--zones",
        default=",".join(DEFAULT_ZONES),
        help="crons: IANA time zones, comma-separated; each zone's crons fire at T's local time",
    )
    parser.add_argument(
        "--calendar",
        action="store_true",
        help="crons: each follows its owner's calendar (60 holidays over the next year, T's "
        "day a business day) with calendarPolicy NEXT_BUSINESS_DAY",
    )
    parser.add_argument(
        "--copy-as-doors",
        action="store_true",
        help="copy: the rows of --owners owners in runs of --create-batch, and the API "
        "processes running idle, as the api/crons doors make the wave and the cluster",
    )
    parser.add_argument(
        "--due-on-minute",
        action="store_true",
        help="copy/api: T at the first whole minute at least the lead ahead, as a crons "
        "wave's always is (the doors' COPY runs for --door crons)",
    )
    parser.add_argument("--payload-bytes", type=int, default=0, help="pad each payload")
    parser.add_argument(
        "--sign",
        action="store_true",
        help="sign every firing with a secret per owner (VAKIT_SIGNING_SECRETS); use with --target http",
    )
    parser.add_argument(
        "--ceiling",
        choices=(*MODES, "both", "none"),
        default="naive",
        help="which raw SQL ceiling to measure after the wave",
    )
    parser.add_argument("--ceiling-rows", type=int, help="default min(jobs, 200000)")
    parser.add_argument("--drain-timeout", type=float, help="give up after this many seconds")
    parser.add_argument(
        "--no-checkpoint",
        dest="checkpoint",
        action="store_false",
        help="no CHECKPOINT on the shards between making the wave and its claims "
        "(default: one, as a deployment has one between writing a round hour's rows and running them)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args(argv)
    ceiling = {"both": MODES, "none": ()}.get(args.ceiling, (args.ceiling,))
    opts = WaveOptions(
        cluster=cluster_spec(args),
        jobs=args.jobs,
        target=args.target,
        lead=args.lead,
        payload_bytes=args.payload_bytes,
        sign=args.sign,
        ceiling=tuple(ceiling),
        ceiling_rows=args.ceiling_rows,
        drain_timeout=args.drain_timeout,
        source=args.source,
        owners=args.owners,
        copy_as_doors=args.copy_as_doors,
        due_on_minute=args.due_on_minute,
        create_batch=args.create_batch,
        clients=args.clients,
        api_procs=args.api_procs,
        zones=tuple(z.strip() for z in args.zones.split(",") if z.strip()),
        calendar=args.calendar,
        checkpoint=args.checkpoint,
    )
    return opts, args.verbose


def main(argv: list[str] | None = None) -> int:
    return bench_main("wave", argv, parse_args, run)


if __name__ == "__main__":
    sys.exit(main())
