"""The raw SQL ceiling: claims and completions in a tight loop, no scheduler.

What the shards can do with the statements alone bounds what any worker
can do; the gap between this and the wave's drain rate is the scheduler's own
cost (Python, event loop, batching, waits).

Two modes, on a fresh batch of rows:

* ``naive`` (the figure the report calls ``ceiling_jobs_per_s``): the seed's
  claim (``FOR UPDATE SKIP LOCKED``, ``LIMIT batch``) and the seed's
  completion, one ``UPDATE … SET status = 'SUCCEEDED' WHERE id = … AND
  status = 'RUNNING' AND attempt = …`` and one commit per job. They run on a
  scratch table created ``LIKE jobs`` with its indexes but without its CHECK
  constraints, since the hot table only allows SCHEDULED and RUNNING; the
  scratch table is dropped afterwards.
* ``batched``: Vakit's own claim and finish, one statement each per claimed
  batch (the finish moves the rows to history), on the hot table itself,
  called through the store's contract (``Store.claim_jobs`` and
  ``Store.finish_jobs`` of :class:`cluster.store.PgStore`): what the store
  can do with no scheduler around it. The statements are the store's own,
  never a copy that could drift from them.

Each driver is a process (``python -m benchmarks.ceiling``) with one thread
and one connection per shard (``batched``: one task and a one-connection
pool per shard), so *drivers* processes give *drivers* connections per
shard: as many as a worker process has claim loops.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.bulk import JobSpec, copy_jobs
from benchmarks.harness import REPO_ROOT
from benchmarks.sql import query
from cluster.model import ClaimParams, FinishParams, JobResult, Outcome
from cluster.store import PgStore

__all__ = ["CEILING_TABLE", "MODES", "CeilingResult", "measure_ceiling"]

CEILING_TABLE = "bench_ceiling_jobs"
MODES = ("naive", "batched")
# Drivers connect, then wait for a common instant, so that process start-up
# (imports, connecting) is not counted as SQL time.
_START_DELAY = 3.0


@dataclass(frozen=True)
class CeilingResult:
    mode: str
    rows: int
    jobs: int
    seconds: float
    connections_per_shard: int
    batch: int

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "rows": self.rows,
            "jobs": self.jobs,
            "seconds": round(self.seconds, 3),
            "jobs_per_s": round(self.jobs_per_s, 1),
            "connections_per_shard": self.connections_per_shard,
            "claim_batch": self.batch,
            "table": CEILING_TABLE if self.mode == "naive" else "jobs",
            "complete": (
                "UPDATE … SET status='SUCCEEDED' per job (scratch table without CHECK)"
                if self.mode == "naive"
                else "finish_jobs per claimed batch (DELETE to job_history + job_attempts)"
            ),
        }


def _run_sql(dsns: list[str], name: str, table: str) -> None:
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(query(name, table))


def measure_ceiling(
    dsns: list[str],
    *,
    rows: int,
    drivers: int,
    batch: int,
    mode: str,
    owner: str,
    log_dir: Path,
) -> CeilingResult:
    """Load ``rows`` due jobs and time ``drivers`` driver processes draining them."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    table = CEILING_TABLE if mode == "naive" else "jobs"
    if mode == "naive":
        _run_sql(dsns, "drop_table", table)
        _run_sql(dsns, "create_ceiling_table", table)
    try:
        due = datetime.now(UTC) - timedelta(seconds=1)
        spec = JobSpec(owner=owner, type="bench.ceiling", run_at=due, target={"kind": "NOOP"})
        load = copy_jobs(dsns, rows, spec, table=table)
        start_at = time.time() + _START_DELAY
        procs = []
        for i in range(drivers):
            args = [sys.executable, "-m", "benchmarks.ceiling", "--mode", mode, "--table", table]
            args += [
                "--batch",
                str(batch),
                "--start-at",
                repr(start_at),
                "--worker",
                f"ceiling-{i}",
            ]
            for dsn in dsns:
                args += ["--dsn", dsn]
            log = log_dir / f"ceiling-{i}.log"
            with open(log, "ab") as err:
                procs.append(
                    subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, cwd=REPO_ROOT)
                )
        reports = []
        try:
            for proc in procs:
                out, _ = proc.communicate(timeout=3600)
                if proc.returncode != 0:
                    raise RuntimeError(f"ceiling driver failed ({proc.returncode}); see {log_dir}")
                reports.append(json.loads(out))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        jobs = sum(r["jobs"] for r in reports)
        began = min(r["began"] for r in reports)
        ended = max(r["ended"] for r in reports)
        return CeilingResult(mode, load.total, jobs, ended - began, drivers, batch)
    finally:
        if mode == "naive":
            _run_sql(dsns, "drop_table", table)


# -- the driver process --------------------------------------------------------------


def _drive_naive(conn: psycopg.Connection[Any], table: str, batch: int, worker: str) -> int:
    claim = query("naive_claim", table)
    complete = query("naive_complete", table)
    done = 0
    while True:
        rows = conn.execute(claim, {"batch": batch, "worker": worker}).fetchall()
        if not rows:
            return done
        for job_id, attempt, _target, _payload in rows:
            conn.execute(complete, {"id": job_id, "attempt": attempt})
        done += len(rows)


async def _drive_batched(
    dsns: list[str], batch: int, worker: str, start_at: float
) -> tuple[int, float, float]:
    """Claim and finish through the store's claim contract (one connection
    per shard, one task per shard); returns (jobs, began, ended)."""
    store = PgStore(dsns, min_size=1, max_size=1, timeout=30.0, name=worker)
    await store.open()
    claim = ClaimParams(worker_id=worker, limit=batch, lease_seconds=30.0, grace_seconds=10.0)

    async def drain(shard: int) -> int:
        done = 0
        while True:
            jobs = await store.claim_jobs(shard, claim)
            if not jobs:
                return done
            now = datetime.now(UTC)
            results = tuple(JobResult(j.lease, Outcome.SUCCEEDED, worker, now, 0.0) for j in jobs)
            await store.finish_jobs(shard, FinishParams(results))
            done += len(jobs)

    try:
        # Connect first (a trivial statement per shard), then start together.
        for shard in range(store.shard_count):
            await store.schema_version(shard)
        await asyncio.sleep(max(0.0, start_at - time.time()))
        began = time.time()
        done = await asyncio.gather(*(drain(s) for s in range(store.shard_count)))
        return sum(done), began, time.time()
    finally:
        await store.close()


def _driver_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one ceiling driver (started by the harness)")
    parser.add_argument("--dsn", action="append", required=True)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--start-at", type=float, required=True)
    parser.add_argument("--worker", required=True)
    args = parser.parse_args(argv)

    if args.mode == "batched":
        jobs, began, ended = asyncio.run(
            _drive_batched(args.dsn, args.batch, args.worker, args.start_at)
        )
        json.dump({"jobs": jobs, "began": began, "ended": ended}, sys.stdout)
        return
    conns = [psycopg.connect(dsn, autocommit=True) for dsn in args.dsn]
    done = [0] * len(conns)
    errors: list[BaseException] = []

    def drive(i: int) -> None:
        try:
            done[i] = _drive_naive(conns[i], args.table, args.batch, args.worker)
        except BaseException as exc:  # reported below; a thread must not die silently
            errors.append(exc)

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(len(conns))]
    time.sleep(max(0.0, args.start_at - time.time()))
    began = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ended = time.time()
    for conn in conns:
        conn.close()
    if errors:
        raise errors[0]
    json.dump({"jobs": sum(done), "began": began, "ended": ended}, sys.stdout)


if __name__ == "__main__":
    _driver_main()
