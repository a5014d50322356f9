"""A cron written due within a minute is materialized at once, not at the
materializer's next pass, and still after its shard's PostgreSQL restarts.

Real processes (an API and a worker) on shards of this test alone. The
worker's materializer passes once an hour here (``VAKIT_MATERIALIZER_INTERVAL``),
so a cron's occurrence made within seconds can only come from a wake-up: the
shard's NOTIFY (migration 15) heard by the leader's LISTEN. The fault: both
shards stopped with ``pg_ctl stop`` and started again; the listeners' links
die with them and must come back on their own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

import shardmap
from cluster.local.pgserver import PgServer
from tests.helpers import wait_for
from tests.procs import TOKEN, FaultSink, ProcessHarness, VakitProcess, running_processes
from tests.shards import rows

pytestmark = pytest.mark.faults

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def harness(own_servers: list[PgServer], tmp_path: Path) -> Iterator[ProcessHarness]:
    with running_processes([s.dsn_for("vakit") for s in own_servers], tmp_path) as h:
        yield h


def create_cron(client: httpx.Client, name: str, url: str) -> uuid.UUID:
    body = {
        "name": name,
        "schedule": "* * * * *",  # the next slot is less than a minute away
        "timeZone": "UTC",
        "target": {"kind": "HTTP", "url": url},
        "payload": {"cron": name},
    }
    for _ in range(60):  # a shard just started may refuse the first tries
        resp = client.post("/api/v1/cron-jobs", json=body)
        if resp.status_code != 503:
            break
        time.sleep(0.5)
    assert resp.status_code == 201, resp.text
    return shardmap.decode_id("cron", resp.json()["cronJobId"])


def occurrences(dsns: list[str], cron_id: uuid.UUID) -> list[datetime]:
    found = rows(
        dsns, "SELECT scheduled_for FROM cron_occurrences WHERE cron_id = %(id)s", {"id": cron_id}
    )
    return [r[0] for r in found]


def made_within(dsns: list[str], cron_id: uuid.UUID, created: float, seconds: float) -> float:
    """Seconds from the create until its first occurrence exists (fails past ``seconds``)."""
    wait_for(lambda: occurrences(dsns, cron_id), timeout=seconds, interval=0.05, what="the occurrence")
    return time.monotonic() - created


def passes(worker: VakitProcess) -> float:
    return sum(
        worker.metric("vakit_maintenance_last_success_timestamp_seconds", loop="materializer", shard=s)
        > 0
        for s in ("0", "1")
    )


def listening(worker: VakitProcess) -> float:
    return worker.metric("vakit_leader_listening", loop="materializer")


def test_a_cron_due_soon_is_made_at_once_and_again_after_its_shards_restart(
    own_servers: list[PgServer], harness: ProcessHarness, sink: FaultSink
) -> None:
    dsns = harness.shards
    api = harness.api()
    worker = harness.worker("worker-0", materializer_interval=3600)
    api.wait_ready()
    worker.wait_ready()
    # The start-up passes are over before any cron exists.
    wait_for(lambda: passes(worker) == 2, timeout=30, what="the materializer's first passes")
    time.sleep(1.0)
    with httpx.Client(base_url=api.base_url, headers=AUTH, timeout=30) as client:
        created = time.monotonic()
        first = create_cron(client, "wake-first", sink.url)
        took = made_within(dsns, first, created, 10)
        [slot] = occurrences(dsns, first)
        assert slot > datetime.now(UTC).replace(second=0, microsecond=0)  # the coming minute's
        print(f"\nfirst occurrence made {took:.2f} s after the create (interval 3600 s)")
        assert listening(worker) == 2
        assert worker.metric("vakit_leader_wakeups_total", loop="materializer") >= 1

        for server in own_servers:
            server.stop("fast")
        time.sleep(1.0)
        for server in own_servers:
            server.start()
        # Listening again is tried every 2 s; by then it has come back.
        time.sleep(6.0)
        created = time.monotonic()
        again = create_cron(client, "wake-after-restart", sink.url)
        took = made_within(dsns, again, created, 10)
        print(f"after both shards restarted: made {took:.2f} s after the create")
        assert listening(worker) == 2  # both listeners are back
    assert worker.alive()
    log = worker.log_text()
    assert "wake-ups from shard" in log  # the listeners saw their links die
