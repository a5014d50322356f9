"""One campaign, start to verdict: the cluster up, load and nemesis for
``duration`` seconds, every fault healed, the firings let settle, the shards
read, the checker run, ``verdict.json`` written.

``python -m benchmarks.campaign --duration 600 --out DIR [--seed N]``; the
seed is printed first, the verdict last, so a failure replays with
``--seed``. (Timing is the machine's: a replay draws the same faults and
requests in the same order, not at the same instants.)
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import sys
import time
from pathlib import Path

import psycopg

import shardmap
from benchmarks.campaign.checker import ABSENT, Verdict, check
from benchmarks.campaign.history import (
    FAULTS_FILE,
    FIRINGS_FILE,
    OPERATIONS_FILE,
    Fault,
    Firing,
    Operation,
    Recorder,
    read_records,
)
from benchmarks.campaign.load import Load
from benchmarks.campaign.nemesis import Nemesis, not_injected
from benchmarks.campaign.nodes import Cluster
from benchmarks.sql import query

__all__ = ["main", "run_campaign"]

log = logging.getLogger("benchmarks.campaign")

# A job due this long before the drain ends must have fired by then (a
# lease of 3 s + 1 s grace, the retry backoff, a worker's restart).
_SLACK_SECONDS = 10.0


def _history(out: Path) -> tuple[list[Operation], list[Firing], list[Fault]]:
    return (
        read_records(out / OPERATIONS_FILE, Operation),
        read_records(out / FIRINGS_FILE, Firing),
        read_records(out / FAULTS_FILE, Fault),
    )


def _outstanding(out: Path, seed: int, now: float) -> int:
    """Acknowledged jobs due by now - slack with no 2xx firing yet. A job
    that any cancel reached may never fire (a cancel whose answer was lost
    still applies): the drain does not wait for it; the verdict reads the
    shards to tell."""
    ops, firings, faults = _history(out)
    cancelled = {op.job for op in ops if op.kind == "cancel"}
    pending = {
        op.job: "CANCELLED" if op.job in cancelled else "SCHEDULED"
        for op in ops
        if op.job is not None
    }
    return check(ops, firings, faults, pending, seed=seed, due_by=now - _SLACK_SECONDS).lost_jobs


def final_state(dsns: list[str], job_ids: set[str]) -> dict[str, str]:
    """Each job id's status in the shards, read directly (no proxy), or ABSENT."""
    by_uuid = {shardmap.decode_id("job", j): j for j in job_ids}
    state = dict.fromkeys(job_ids, ABSENT)
    for dsn in dsns:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            for uid, status, _ in conn.execute(
                query("campaign_job_states"), {"ids": list(by_uuid)}
            ).fetchall():
                state[by_uuid[uid]] = status
    return state


def run_campaign(
    duration: float,
    out: Path,
    seed: int,
    *,
    rate: float = 8.0,
    settle: float = 60.0,
    workers: int = 2,
    apis: int = 2,
    durable: bool = True,
    gap: tuple[float, float] = (1.0, 5.0),
) -> Verdict:
    out.mkdir(parents=True, exist_ok=True)
    for name in (OPERATIONS_FILE, FIRINGS_FILE, FAULTS_FILE):
        (out / name).unlink(missing_ok=True)
    cluster = Cluster(out, workers=workers, apis=apis, durable=durable)
    operations = Recorder(out / OPERATIONS_FILE)
    fault_log = Recorder(out / FAULTS_FILE)
    began = time.monotonic()
    try:
        cluster.start()
        started = time.monotonic() - began
        log.info("cluster up in %.1f s", started)
        load = Load(cluster.api_urls, cluster.target_url, operations, seed, rate=rate)
        nemesis = Nemesis(cluster, seed, fault_log, gap=gap)
        load.start()
        nemesis.start()
        time.sleep(duration)
        nemesis.stop()
        load.stop()
        cluster.heal()
        load_end = time.time()
        # Let every job due by now fire (the workers catch up after the last
        # fault), but no longer than ``settle``.
        while time.time() < load_end + settle:
            now = time.time()
            if now > load_end + _SLACK_SECONDS and not _outstanding(out, seed, now):
                break
            time.sleep(1.0)
        drained = time.time()
        ops, _, _ = _history(out)
        acked = {op.job for op in ops if op.ack and op.job and op.kind.startswith("create")}
        final = final_state([s.server.dsn for s in cluster.shards], acked)
        # Beside the history: the checker can be run again on the files alone.
        (out / "final.json").write_text(json.dumps(final, indent=0) + "\n")
    finally:
        operations.close()
        fault_log.close()
        cluster.stop()
    ops, firings, faults = _history(out)
    verdict = check(ops, firings, faults, final, seed=seed, due_by=drained - _SLACK_SECONDS)
    verdict.details.update(
        duration_seconds=duration,
        cluster_start_seconds=round(started, 1),
        drain_seconds=round(drained - load_end, 1),
        nemesis_errors=nemesis.errors[:20],
        not_injected=not_injected(cluster),
        durable_shards=durable,
    )
    (out / "verdict.json").write_text(json.dumps(verdict.as_dict(), indent=2) + "\n")
    return verdict


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, required=True, help="seconds of load and faults")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--rate", type=float, default=8.0, help="requests a second")
    parser.add_argument("--strict", action="store_true", help="exit 1 unless the verdict is clean")
    parser.add_argument(
        "--unsafe-db",
        action="store_true",
        help="shards without fsync and synchronous_commit: a removed protection, to see "
        "the checker count the acknowledged creates a killed shard loses",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    print(f"campaign seed {seed} (replay: --seed {seed})", flush=True)
    verdict = run_campaign(
        args.duration, args.out, seed, rate=args.rate, durable=not args.unsafe_db
    )
    print(json.dumps(verdict.as_dict(), indent=2))
    print(
        f"campaign seed {seed}: {'clean' if verdict.clean else 'NOT CLEAN'}; {args.out / 'verdict.json'}"
    )
    if args.strict and not verdict.clean:
        sys.exit(1)
