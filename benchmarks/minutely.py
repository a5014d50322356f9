"""Every-minute crons: N crons ``* * * * *`` made through the API, each
firing an HTTP target, watched for M minutes.

Issue 10's third figure: 20,000 crons that fire every minute, HTTP target on
loopback, default settings: every minute's occurrences all started, p99 start
lateness at most 2 s. Unlike the wave, the load never stops: each minute the
materializer must make the next slot's N occurrences and the workers must
start and finish the last one's, while the HTTP sink answers every firing.

Steps: start the shards, the workers, an HTTP sink and the API; create the N
crons with ``POST /api/v1/cron-jobs:batch`` across several owners and zones
(every zone's ``* * * * *`` fires at the same instants); then wait until M
whole-minute slots that begin after the creation ended have passed, plus the
time to finish the last one; read every occurrence back from the shards.
The report has each slot's figures (expected, made, started, lateness
percentiles) and the headline is over all measured slots together; the worst
slot's p99 is printed too. Slots are never dropped from the figures: the
first measured slot is the first whole minute after the last cron exists.
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

from benchmarks.apiload import CRONS, ItemSource, create_items
from benchmarks.cronwave import slot_at_least
from benchmarks.harness import BenchCluster, ClusterSpec, ProcessSampler, bench_main, new_run
from benchmarks.options import add_cluster_options, cluster_spec, run_settings, settings_in_effect
from benchmarks.outcomes import collect, figures, server_info
from benchmarks.report import headline, machine_info, write_report
from benchmarks.stats import summarize
from cluster.model import CronDefinition
from cluster.services.cron_document import document_of

__all__ = ["MinutelyOptions", "main", "run"]

log = logging.getLogger("benchmarks.minutely")

# `* * * * *` fires at the same instants in every zone; several zones still
# exercise the per-zone schedule code as real owners' crons would.
ZONES = ("UTC", "Europe/Istanbul", "Asia/Kolkata", "America/New_York")


@dataclass
class MinutelyOptions:
    cluster: ClusterSpec
    crons: int = 20_000
    minutes: int = 3
    target: str = "http"
    owners: int = 4
    create_batch: int = 1000
    clients: int = 8
    api_procs: int = 1
    # Start creating at this second of a minute (None: at once). 56 makes
    # the first slot come a few seconds after the last cron exists.
    create_at: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # recorded in settings


def seconds_until_second(now: datetime, second: int) -> float:
    """Seconds from ``now`` to the next instant at ``second`` past a whole minute."""
    target = now.replace(second=second, microsecond=0)
    if target <= now:
        target += timedelta(minutes=1)
    return (target - now).total_seconds()


def _body_factory(owner_index: int, owners: int, target: dict[str, Any], tag: str) -> Any:
    # One document per zone from the shared definition type; each cron is a
    # copy under its own name and payload (see cronwave.cron_body_factory).
    documents = [
        document_of(
            CronDefinition(
                name=f"minutely-{tag}",
                schedule="* * * * *",
                time_zone=zone,
                type="bench.minutely",
                target=target,
                max_attempts=3,
                timeout_seconds=30,
            ),
            compact=True,
        )
        for zone in ZONES
    ]

    def body(i: int) -> dict[str, Any]:
        document = documents[(i * owners + owner_index) % len(ZONES)]
        return {**document, "name": f"minutely-{tag}-{i}", "payload": {"i": i}}

    return body


def run(opts: MinutelyOptions) -> dict[str, Any]:
    spec = opts.cluster
    run_id, owner = new_run()
    machine = machine_info()
    owners = [f"{owner}-{k}" for k in range(opts.owners)]
    with BenchCluster(spec) as cluster:
        dsns, target = cluster.start_scheduler(opts.target)
        worker_settings = settings_in_effect(cluster.base_env())
        tokens = {secrets.token_urlsafe(18): o for o in owners}
        urls = cluster.start_apis(tokens, opts.api_procs)
        counts = [
            opts.crons // len(owners) + (1 if k < opts.crons % len(owners) else 0)
            for k in range(len(owners))
        ]
        tag = secrets.token_hex(4)
        sources: list[ItemSource] = [
            (token, counts[k], _body_factory(k, len(owners), target, tag))
            for k, token in enumerate(tokens)
        ]
        with ProcessSampler(cluster) as sampler:
            if opts.create_at is not None:
                time.sleep(seconds_until_second(datetime.now(UTC), opts.create_at))
            mark = sampler.mark()
            created = asyncio.run(
                create_items(urls, sources, CRONS, batch=opts.create_batch, clients=opts.clients)
            )
            create_usage = sampler.usage_since(mark)
            ended = datetime.now(UTC)
            first = slot_at_least(ended, 1.0)
            slots = [first + timedelta(minutes=k) for k in range(opts.minutes)]
            lead = (first - ended).total_seconds()
            log.info(
                "created %d of %d crons in %.1f s, %.1f s before the first slot; "
                "measuring the slots %s to %s",
                created.accepted,
                created.requested,
                created.seconds,
                lead,
                slots[0].strftime("%H:%M"),
                slots[-1].strftime("%H:%M"),
            )
            window = sampler.mark()
            cluster.reset_statement_stats()
            # Past the last slot: time for its occurrences to start and finish.
            deadline = slots[-1] + timedelta(seconds=60)
            while datetime.now(UTC) < deadline:
                cluster.check_alive()
                left = (deadline - datetime.now(UTC)).total_seconds()
                print(
                    f"minutely: {cluster.finished_jobs():,} firings finished; "
                    f"{max(0.0, left):.0f} s to go",
                    file=sys.stderr,
                    flush=True,
                )
                time.sleep(min(10.0, max(0.1, left)))
            usage = sampler.usage_since(window)
        sink_count = cluster.sink_count() if opts.target == "http" else None
        statements = cluster.statement_stats()
        cluster.stop_processes()
        outcomes = collect(dsns, owners)
        pg = server_info(dsns[0])
    per_slot: list[dict[str, Any]] = []
    for s in slots:
        slot = outcomes.scheduled_in({s.timestamp()})
        late = slot.lateness()
        per_slot.append(
            {
                "slot": s.isoformat(),
                "expected": created.accepted,
                "finished_jobs": slot.finished_count,
                "started": len(late),
                "all_started": len(late) == created.accepted,
                "lateness_seconds": summarize(late),
                # When the slot's occurrences were made, from the slot
                # (negative: before it): a late start made late is the
                # materializer's, one made early the workers'.
                "made_seconds": summarize([c - s.timestamp() for c in slot.created]),
            }
        )
    p99s = [p["lateness_seconds"]["p99"] for p in per_slot]
    worst_p99 = max((p for p in p99s if p is not None), default=None)
    measured = outcomes.scheduled_in({s.timestamp() for s in slots})
    expected = created.accepted * len(slots)
    figs = figures(measured, expected, slots[0].timestamp())
    api_cpu = create_usage.cpu_seconds.get("api")
    report: dict[str, Any] = {
        **headline("minutely", expected, figs, None, sampler.peak_rss()),
        "slots": per_slot,
        "all_slots_all_started": all(p["all_started"] for p in per_slot),
        "worst_slot_p99_seconds": worst_p99,
        "first_slot_lead_seconds": round(lead, 3),
        "create": {
            **created.as_dict(api_cpu),
            "usage": create_usage.as_dict(created.accepted or None),
        },
        "usage": usage.as_dict(expected),
        "counts": outcomes.counts(),
        "sink_firings": sink_count,
        "pg_top_statements": statements,
        "worker_counters": None,
        "settings": {
            "source": "crons-every-minute",
            "crons": opts.crons,
            "minutes": opts.minutes,
            "create_at_second": opts.create_at,
            "shards": len(dsns),
            "workers": spec.workers,
            "target": opts.target,
            "owners": len(owners),
            "zones": list(ZONES),
            "api_processes": len(urls),
            "slots": [s.isoformat() for s in slots],
            **run_settings(spec, worker_settings, pg, machine, run_id, opts.extra),
        },
    }
    write_report(spec.out, report)
    return report


def parse_args(argv: list[str] | None) -> tuple[MinutelyOptions, bool]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.minutely", description=__doc__.split("\n\n")[0]
    )
    add_cluster_options(parser, default_out="bench-out/minutely")
    parser.set_defaults(target="http")
    parser.add_argument("--crons", type=int, default=20_000, help="crons `* * * * *`")
    parser.add_argument("--minutes", type=int, default=3, help="whole-minute slots measured")
    parser.add_argument("--owners", type=int, default=4, help="owner services, one token each")
    parser.add_argument("--create-batch", type=int, default=1000, help="crons per batch request")
    parser.add_argument("--clients", type=int, default=8, help="create requests in flight")
    parser.add_argument(
        "--create-at",
        type=int,
        choices=range(60),
        metavar="SECOND",
        help="start creating at this second of a minute (56: the first slot comes seconds "
        "after the crons exist); default: at once",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args(argv)
    opts = MinutelyOptions(
        cluster=cluster_spec(args),
        crons=args.crons,
        minutes=args.minutes,
        target=args.target,
        owners=args.owners,
        create_batch=args.create_batch,
        clients=args.clients,
        api_procs=args.api_procs,
        create_at=args.create_at,
    )
    return opts, args.verbose


def main(argv: list[str] | None = None) -> int:
    code = bench_main("minutely", argv, parse_args, run)
    return code


if __name__ == "__main__":
    sys.exit(main())
