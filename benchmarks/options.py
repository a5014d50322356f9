"""Command-line options every benchmark shares, and what they turn into:
worker knobs (``VAKIT_*`` variables) and the cluster spec.

The knobs are passed to the worker processes as environment variables, the
way an operator would set them; ``settings_in_effect`` reads them back through
Vakit's own :class:`~cluster.config.Settings`, so the report shows the values
the workers ran with, defaults included.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO_ROOT, ClusterSpec, parse_env_pairs

__all__ = [
    "WORKER_SETTING_NAMES",
    "add_cluster_options",
    "cluster_spec",
    "durability",
    "git_commit",
    "knobs_label",
    "run_settings",
    "settings_in_effect",
    "worker_knobs",
]

# The worker settings that shape throughput and lateness, reported with every run.
WORKER_SETTING_NAMES = (
    "claim_batch",
    "max_inflight",
    "prefetch_seconds",
    "preload_memory_bytes",
    "poll_interval",
    "complete_batch",
    "complete_linger",
    "pool_min_size",
    "pool_max_size",
    "lease_seconds",
    "lease_grace_seconds",
    "http_pool_size",
    "target_limits",
    "reaper_interval",
)


def add_cluster_options(
    parser: argparse.ArgumentParser,
    default_out: str,
    claim_batch_flags: tuple[str, ...] = ("--batch", "--claim-batch"),
) -> None:
    """The options every benchmark has. ``claim_batch_flags`` names the
    option(s) for the workers' claim batch: the wave keeps ``--batch`` for it,
    the sustained run uses ``--batch`` for its create batch instead."""
    parser.add_argument(
        "--shards", type=int, default=2, help="PostgreSQL shards to start (ignored with --dsn)"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--target",
        choices=("noop", "http", "kafka"),
        default="noop",
        help="where jobs fire: NOOP, an HTTP sink on loopback (benchmarks.sink), or a "
        "topic on a Tansu broker started here",
    )
    parser.add_argument("--out", type=Path, default=Path(default_out), help="report directory")
    parser.add_argument(
        *claim_batch_flags,
        dest="claim_batch",
        type=int,
        help="VAKIT_CLAIM_BATCH (default: the worker's)",
    )
    parser.add_argument(
        "--prefetch", type=float, help="VAKIT_PREFETCH_SECONDS (default: the worker's)"
    )
    parser.add_argument(
        "--max-inflight", type=int, help="VAKIT_MAX_INFLIGHT (default: the worker's)"
    )
    parser.add_argument(
        "--dsn",
        action="append",
        default=[],
        help="use this running shard instead of starting one (repeat, in shard order)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="VAKIT_NAME=VALUE",
        help="any other worker/API setting, e.g. VAKIT_COMPLETE_BATCH=1000 (repeat)",
    )
    parser.add_argument(
        "--pg-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra postgresql.conf setting for the shards started here (repeat)",
    )
    parser.add_argument(
        "--unsafe-fast-db",
        action="store_true",
        help="start the shards with fsync, synchronous_commit and full_page_writes off "
        "(fast, loses data on a crash; default: PostgreSQL's durable settings)",
    )
    parser.add_argument(
        "--api-procs", type=int, default=1, help="API processes, where the run uses the API"
    )
    parser.add_argument(
        "--no-zookeeper",
        dest="zookeeper",
        action="store_false",
        help="start no ZooKeeper: every worker then claims from and leads every shard "
        "(default: one ZooKeeper, as `vakit up`, assigning shard owners and leaders)",
    )
    parser.add_argument(
        "--keep-data", action="store_true", help="keep the PostgreSQL data directories"
    )
    parser.add_argument(
        "--pg-stats",
        action="store_true",
        help="load pg_stat_statements on the shards and report the costliest statements",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy every worker while it runs jobs; profile-worker-N.txt and a summary",
    )


def worker_knobs(args: argparse.Namespace) -> dict[str, str]:
    knobs = parse_env_pairs(args.env)
    for name, value in (
        ("VAKIT_CLAIM_BATCH", args.claim_batch),
        ("VAKIT_PREFETCH_SECONDS", args.prefetch),
        ("VAKIT_MAX_INFLIGHT", args.max_inflight),
    ):
        if value is not None:
            knobs[name] = str(value)
    return knobs


def cluster_spec(args: argparse.Namespace) -> ClusterSpec:
    pg_settings = {}
    for item in args.pg_setting:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--pg-setting expects NAME=VALUE, got {item!r}")
        pg_settings[key] = value
    return ClusterSpec(
        out=args.out,
        shards=len(args.dsn) if args.dsn else args.shards,
        workers=args.workers,
        dsns=list(args.dsn),
        worker_env=worker_knobs(args),
        pg_settings=pg_settings,
        keep_data=args.keep_data,
        statement_stats=args.pg_stats,
        profile_workers=args.profile,
        durable=not args.unsafe_fast_db,
        zookeeper=args.zookeeper,
    )


def settings_in_effect(
    env: dict[str, str], names: tuple[str, ...] = WORKER_SETTING_NAMES
) -> dict[str, Any]:
    """The settings ``names`` (by default the worker's) that ``env`` (a
    process's environment) produces."""
    from cluster.config import Settings

    values: dict[str, Any] = {
        k.removeprefix("VAKIT_").lower(): v
        for k, v in env.items()
        if k.startswith("VAKIT_") and k != "VAKIT_CONFIG"
    }
    settings = Settings(**values)
    return settings.model_dump(include=set(names))


def shown_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` as a report shows it: the settings that hold secrets
    (:data:`cluster.config.SECRET_SETTINGS`) replaced by ``(set)``."""
    from cluster.config import SECRET_SETTINGS

    secret = {f"VAKIT_{name.upper()}" for name in SECRET_SETTINGS}
    return {k: "(set)" if k in secret else v for k, v in env.items()}


def knobs_label(spec: ClusterSpec) -> str:
    """The worker settings a run set itself, for every printed figure:
    ``defaults`` or ``claim_batch=500,max_inflight=60000,prefetch_seconds=10``."""
    if not spec.worker_env:
        return "defaults"
    return ",".join(
        f"{k.removeprefix('VAKIT_').lower()}={v}"
        for k, v in sorted(shown_env(spec.worker_env).items())
    )


def durability(postgresql: dict[str, Any]) -> dict[str, Any]:
    """Whether the shards ran durable, read back from the server (so a
    ``--dsn`` shard is described as it is, not as it was asked to be)."""
    settings = postgresql.get("settings", {})
    unsafe = {
        name: settings.get(name)
        for name in ("fsync", "synchronous_commit", "full_page_writes")
        if settings.get(name) == "off"
    }
    return {
        "durable": not unsafe,
        "db": "durable" if not unsafe else "unsafe-fast (" + ",".join(sorted(unsafe)) + " off)",
    }


def git_commit() -> str | None:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() or None


def run_settings(
    spec: ClusterSpec,
    worker_settings: dict[str, Any],
    postgresql: dict[str, Any],
    machine: dict[str, Any],
    run_id: str,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The part of a report's ``settings`` every benchmark has: the workers'
    settings, the shards, the machine and the commit. ``extra`` comes last, so
    a caller's own entries win."""
    return {
        **durability(postgresql),
        "knobs": knobs_label(spec),
        "worker": worker_settings,
        "worker_env": shown_env(spec.worker_env),
        "shards_given": bool(spec.dsns),
        "postgresql": postgresql,
        "pg_settings": spec.pg_settings,
        "coordination": (
            "ZooKeeper (shard owners and leaders, as vakit up)"
            if spec.zookeeper
            else "none (every worker polls and leads every shard)"
        ),
        "machine": machine,
        "git_commit": git_commit(),
        "run_id": run_id,
        **extra,
    }
