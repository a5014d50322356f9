"""A shard that survives its primary (issue 46): shard 1 is a primary with a
synchronous streaming standby, its DSN in libpq's multi-host form
(``target_session_attrs=read-write``). Under steady keyed creates the
primary is SIGKILLed (its server processes with it) and the standby
promoted, as ``vakit up --replicas 1``'s supervisor or Patroni would.

Invariants: every create that got a 2xx is a job on the promoted server
(the commit waited for the standby), and succeeds exactly once; every
refused create, sent again with its key, is one job; no ``(jobId,
attempt)`` fires twice and each job's attempts only grow (the fencing token
lives in the replicated rows). The API and the worker find the new primary
by themselves. The promotion and the time to the next create on the shard
are printed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import shardmap
from cluster.local.pgserver import PgServer
from cluster.local.replica import ReplicatedShard, start_standby, sync_primary_settings
from cluster.store.migrate import migrate_shard
from tests.faults.test_postgres_crash import crash
from tests.faults.test_worker_faults import SHARD_MAP
from tests.helpers import wait_for
from tests.load import Load
from tests.pgfixtures import make_base_dir, start_pg
from tests.procs import TOKEN, FaultSink, ProcessHarness, running_processes
from tests.shards import rows

pytestmark = pytest.mark.faults

REPLICATED = 1
TZ = {"timezone": "'Asia/Kolkata'"}


@pytest.fixture
def replicated() -> Iterator[tuple[PgServer, ReplicatedShard]]:
    """Shard 0 a plain server; shard 1 a primary and its synchronous standby,
    each with a migrated database "vakit"."""
    base = make_base_dir("vakit-failover-pg-")
    plain = start_pg(base, "shard0")
    primary = PgServer(
        base / "shard1a", durable=False, extra_settings={**TZ, **sync_primary_settings()}
    )
    servers = [plain, primary]
    try:
        primary.start()
        for i, server in enumerate(servers):
            server.create_database("vakit")
            migrate_shard(server.dsn_for("vakit"), i)
        standby = start_standby(primary, base / "shard1b", durable=False, extra_settings=TZ)
        servers.append(standby)
        yield plain, ReplicatedShard([primary, standby])
    finally:
        for server in servers:
            server.stop("immediate")
        import shutil

        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def failover_procs(
    replicated: tuple[PgServer, ReplicatedShard], tmp_path: Path
) -> Iterator[ProcessHarness]:
    plain, shard = replicated
    with running_processes([plain.dsn_for("vakit"), shard.dsn("vakit")], tmp_path) as harness:
        yield harness


def test_a_promoted_standby_keeps_every_acknowledged_create(
    replicated: tuple[PgServer, ReplicatedShard], failover_procs: ProcessHarness, sink: FaultSink
) -> None:
    _, shard = replicated
    dsns = failover_procs.shards
    api = failover_procs.api()
    worker = failover_procs.worker("worker-a")
    api.wait_ready()
    worker.wait_ready()

    with Load(api.base_url, sink.url) as load:
        wait_for(lambda: len(load.answers) >= 200, timeout=30, what="load before the crash")
        acknowledged_before = sum(1 for status, _ in load.answers.values() if status in (200, 201))
        crash(shard.primary)
        killed = time.monotonic()
        # What a supervisor does once it sees the primary gone.
        assert shard.primary_lost()
        promotion = shard.fail_over()
        promoted = time.monotonic()
        wait_for(
            lambda: load.created_on.get(REPLICATED, 0.0) > promoted,
            timeout=30,
            what="a create on the promoted shard",
        )
        serving = time.monotonic() - promoted
        time.sleep(1)

    statuses = [status for status, _ in load.answers.values()]
    refused = [k for k, (status, _) in load.answers.items() if status not in (200, 201)]
    assert set(statuses) <= {0, 200, 201, 503}, sorted(set(statuses))
    with httpx.Client(
        base_url=api.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    ) as client:
        for key in refused:
            resp = client.post(
                "/api/v1/jobs", json=load.body(key), headers={"Idempotency-Key": key}
            )
            assert resp.status_code in (200, 201), resp.text
            load.answers[key] = (resp.status_code, resp.json()["jobId"])
    accepted = {key: job for key, (_, job) in load.answers.items() if job}
    assert len(accepted) == len(load.answers)
    ids = [shardmap.decode_id("job", j) for j in accepted.values()]

    def done() -> int:
        found = rows(
            dsns,
            "SELECT count(*) FROM job_history WHERE status = 'SUCCEEDED' AND id = ANY(%(ids)s)",
            {"ids": ids},
        )
        return sum(int(r[0]) for r in found)

    wait_for(lambda: done() >= len(accepted), timeout=60, what="every accepted job to succeed")
    # One job per key, on the shard its key routes to, finished once.
    found = rows(dsns, "SELECT idempotency_key, id, status FROM job_history")
    found += rows(dsns, "SELECT idempotency_key, id, status FROM jobs")
    found += rows(dsns, "SELECT idempotency_key, id, status FROM jobs_far")
    by_key: dict[str, list[tuple[str, str]]] = {}
    for key, job_id, status in found:
        by_key.setdefault(key, []).append((shardmap.encode_id("job", job_id), status))
    assert by_key == {key: [(job, "SUCCEEDED")] for key, job in accepted.items()}
    on_replicated = [
        j for j in accepted.values() if SHARD_MAP.shard_of(shardmap.decode_id("job", j)) == 1
    ]
    assert on_replicated, "no job lived on the replicated shard"
    # Each (jobId, attempt) fired once, attempts in order.
    for job, firings in sink.by_job().items():
        attempts = [f.attempt for f in firings]
        assert attempts == sorted(set(attempts)), (job, attempts)
    assert worker.alive() and api.alive()
    print(
        f"\nprimary of shard {REPLICATED} SIGKILLed under load: {len(load.answers)} keyed creates "
        f"({acknowledged_before} acknowledged before the crash, {len(refused)} refused and "
        f"created by their retry), 0 lost; promotion took {promotion:.2f} s "
        f"({promoted - killed:.2f} s after the kill); creates reached the shard "
        f"{serving:.2f} s after the promotion"
    )
