"""benchmarks.reshard's load and its waits: the bodies of the jobs and crons
it creates (each payload names its kind and index, which the audit at the
target reads back), and the waits on the clock and on the shards.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from typing import Any

import psycopg

from benchmarks.firings import CRON
from benchmarks.harness import BenchCluster
from benchmarks.sql import query
from cluster.instants import format_instant

__all__ = ["cron_body", "due_pending", "job_body", "sleep_until", "wait_backlog"]


def job_body(kind: str, run_at: datetime, target: dict[str, Any], i: int) -> dict[str, Any]:
    return {
        "type": f"bench.reshard.{kind}",
        "runAt": format_instant(run_at),
        "target": target,
        "payload": {"k": kind, "i": i},
        "maxAttempts": 3,
        "timeoutSeconds": 30,
    }


def cron_body(target: dict[str, Any], tag: str, i: int) -> dict[str, Any]:
    return {
        "name": f"reshard-{tag}-{i}",
        "schedule": "* * * * *",
        "timeZone": "UTC",
        "type": "bench.reshard.cron",
        "target": target,
        "payload": {"k": CRON, "i": i},
        "maxAttempts": 3,
        "timeoutSeconds": 30,
    }


def due_pending(dsns: list[str], owner: str, until: datetime) -> int:
    total = 0
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                query("owner_due_pending"), {"owners": [owner], "until": until}
            ).fetchone()
            total += int(row[0]) if row else 0
    return total


def sleep_until(when: float, cluster: BenchCluster, what: str) -> None:
    while (left := when - time.time()) > 0:
        cluster.check_alive()
        print(f"reshard: {left:.0f} s until {what}", file=sys.stderr, flush=True)
        time.sleep(min(left, 10.0))


def wait_backlog(
    cluster: BenchCluster, dsns: list[str], owner: str, until: datetime, timeout: float
) -> dict[str, Any]:
    """Until nothing of the run due at or before ``until`` is pending on any
    shard (each fired, and answered, so it is on the sink's record)."""
    started = time.time()
    sleep_until(until.timestamp(), cluster, "the last runAt waited for")
    while True:
        cluster.check_alive()
        pending = due_pending(dsns, owner, until)
        waited = time.time() - started
        if pending == 0 or waited > timeout:
            return {
                "until": until.isoformat(),
                "pending_left": pending,
                "seconds": round(waited, 1),
            }
        print(
            f"reshard: {pending:,} jobs due by {until:%H:%M:%S} still pending",
            file=sys.stderr,
            flush=True,
        )
        time.sleep(2.0)
