"""A shard's PostgreSQL crashes under load: the postmaster is SIGKILLed (its
server processes die with it), then started again and recovers from its WAL.

The servers here commit synchronously (``synchronous_commit=on``, as in
production; the other test servers turn it off, and a crash would then lose
the last commits by design). fsync stays off: the operating system does not
crash, so what was written survives in its page cache.

Invariants: every create that got a 2xx is a job that succeeds exactly once;
every create that got a 503 is created by its retry with the same key (one
job per key); no job is completed twice. Recovery times are printed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import shardmap
from cluster.local.pgserver import PgServer
from tests.faults.test_worker_faults import SHARD_MAP
from tests.helpers import wait_for
from tests.load import Load
from tests.pgfixtures import migrated_servers, start_pg
from tests.procs import TOKEN, FaultSink, ProcessHarness, running_processes
from tests.shards import rows

pytestmark = pytest.mark.faults

CRASHED = 1


def children(pid: int) -> list[int]:
    """The server processes the postmaster ``pid`` started (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def crash(server: PgServer) -> None:
    """SIGKILL the postmaster, then every server process it left, by pid."""
    pid = server.pid()
    assert pid is not None, "the server is not running"
    left = children(pid)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in left):
        time.sleep(0.05)
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def durable_servers() -> Iterator[list[PgServer]]:
    def start(base: Path, i: int) -> PgServer:
        return start_pg(base, f"shard{i}", synchronous_commit=True)

    with migrated_servers("vakit-crash-pg-", start) as servers:
        yield servers


@pytest.fixture
def crash_procs(durable_servers: list[PgServer], tmp_path: Path) -> Iterator[ProcessHarness]:
    with running_processes([s.dsn_for("vakit") for s in durable_servers], tmp_path) as harness:
        harness.settings.update({"statement_timeout": "2", "connect_timeout": "1"})
        yield harness


def test_a_crashed_shard_recovers_and_loses_no_accepted_job(
    durable_servers: list[PgServer], crash_procs: ProcessHarness, sink: FaultSink
) -> None:
    dsns = crash_procs.shards
    api = crash_procs.api()
    workers = [crash_procs.worker(f"worker-{i}") for i in range(2)]
    api.wait_ready()
    for w in workers:
        w.wait_ready()
    server = durable_servers[CRASHED]

    with Load(api.base_url, sink.url) as load:
        wait_for(lambda: len(load.answers) >= 200, timeout=30, what="load before the crash")
        crash(server)
        crashed = time.monotonic()
        time.sleep(5)  # the shard is down under load
        server.start()
        started = time.monotonic()
        wait_for(
            lambda: load.created_on.get(CRASHED, 0.0) > started,
            timeout=60,
            what="a create on the recovered shard",
        )
        serving = time.monotonic() - started
        time.sleep(2)
    log = server.log_file.read_text(errors="replace")
    assert "automatic recovery in progress" in log  # a crash recovery, not a clean start

    statuses = [status for status, _ in load.answers.values()]
    refused = load.refused()
    assert refused, "the crash refused no create: it did not happen under load"
    assert set(statuses) <= {0, 200, 201, 503}, sorted(set(statuses))
    with httpx.Client(
        base_url=api.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    ) as client:
        # Every refused create, sent again with its key, is created now or
        # was already (its commit landed before the crash): one job either way.
        accepted = load.retry_refused(client)

    def done() -> int:
        found = rows(
            dsns,
            "SELECT count(*) FROM job_history WHERE status = 'SUCCEEDED' AND id = ANY(%(ids)s)",
            {"ids": [shardmap.decode_id("job", j) for j in accepted.values()]},
        )
        return sum(int(r[0]) for r in found)

    wait_for(lambda: done() >= len(accepted), timeout=90, what="every accepted job to succeed")
    all_done = time.monotonic() - started
    # One job per key, each finished once, SUCCEEDED; nothing else exists.
    found = rows(dsns, "SELECT idempotency_key, id, status FROM job_history")
    found += rows(dsns, "SELECT idempotency_key, id, status FROM jobs")
    found += rows(dsns, "SELECT idempotency_key, id, status FROM jobs_far")
    by_key: dict[str, list[tuple[str, str]]] = {}
    for key, job_id, status in found:
        by_key.setdefault(key, []).append((shardmap.encode_id("job", job_id), status))
    assert by_key == {key: [(job, "SUCCEEDED")] for key, job in accepted.items()}
    on_crashed = [
        j for j in accepted.values() if SHARD_MAP.shard_of(shardmap.decode_id("job", j)) == CRASHED
    ]
    assert on_crashed, "no job lived on the crashed shard"
    print(
        f"\npostmaster SIGKILL: {len(load.answers)} keyed creates, {len(refused)} refused while "
        f"shard {CRASHED} was down ({time.monotonic() - crashed:.1f} s ago), "
        f"{len(on_crashed)} jobs on it; creates reached it {serving:.2f} s after the restart, "
        f"every job was done {all_done:.2f} s after it"
    )
