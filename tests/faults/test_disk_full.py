"""A shard's disk fills up: its PostgreSQL data directory sits on a small
tmpfs (mounted here; the tests run as root) that a filler file leaves almost
full, and the API keeps creating jobs on that shard until the disk refuses.

Invariants: a create the full disk refuses is a 503 problem (never a 500,
never a 2xx for a job that was not written), the other shard keeps serving,
and once space is freed every job that got a 2xx is there and new creates
succeed. The size and the bytes written before the refusal are printed.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from cluster.local.pgserver import PgServer
from tests.faults.test_worker_faults import key_on
from tests.helpers import wait_for
from tests.pgfixtures import make_base_dir, migrated_servers, start_pg
from tests.procs import TOKEN, FaultSink, running_processes
from tests.shards import api_body, rows

pytestmark = pytest.mark.faults

FULL = 1
DISK_MB = 192
LEFT_MB = 12  # free space the filler leaves


@pytest.fixture
def small_disk() -> Iterator[Path]:
    base = make_base_dir("vakit-disk-")
    mount = base / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m,mode=0755", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"cannot mount a {DISK_MB} MB tmpfs (the fault tests run as root): {done.stderr}"
        )
    try:
        shutil.chown(mount, "postgres", "postgres")
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def disk_servers(small_disk: Path) -> Iterator[list[PgServer]]:
    def start(base: Path, i: int) -> PgServer:
        # Shard 1 lives on the small disk. Commits are synchronous, as in
        # production: with them off, a server that stops on a full disk
        # loses commits it had acknowledged.
        if i == 1:
            return start_pg(small_disk, "shard1", synchronous_commit=True)
        return start_pg(base, f"shard{i}")

    with migrated_servers("vakit-disk-pg-", start) as servers:
        yield servers


def free_mb(path: Path) -> float:
    return shutil.disk_usage(path).free / 2**20


def test_a_full_disk_refuses_creates_with_503_and_loses_none(
    small_disk: Path, disk_servers: list[PgServer], tmp_path: Path, sink: FaultSink
) -> None:
    dsns = [s.dsn_for("vakit") for s in disk_servers]
    filler = small_disk / "filler"
    with running_processes(dsns, tmp_path) as procs:
        procs.settings.update({"statement_timeout": "5", "connect_timeout": "2"})
        api = procs.api()
        api.wait_ready()
        size = int((free_mb(small_disk) - LEFT_MB) * 2**20)
        subprocess.run(["fallocate", "-l", str(size), str(filler)], check=True)
        client = httpx.Client(
            base_url=api.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
        )
        accepted: dict[str, str] = {}
        refusal: httpx.Response | None = None
        written = 0
        run_at = datetime.now(UTC) + timedelta(days=1)
        with client:
            for i in range(2000):
                key = key_on(FULL, f"fill-{i}-")
                # Random, so that PostgreSQL cannot compress it; just under
                # the default payload limit.
                body = api_body(
                    sink.url, run_at, {"blob": base64.b64encode(os.urandom(45_000)).decode()}
                )
                resp = client.post("/api/v1/jobs", json=body, headers={"Idempotency-Key": key})
                if resp.status_code >= 300:
                    refusal = resp
                    break
                accepted[key] = resp.json()["jobId"]
                written += 60_000
            assert refusal is not None, f"{written} bytes went in without filling the disk"
            full_at = time.monotonic()
            assert refusal.status_code == 503, refusal.text
            assert refusal.headers["content-type"].startswith("application/problem+json")
            assert refusal.json()["shard"] == FULL
            # The other shard serves meanwhile.
            other = client.post(
                "/api/v1/jobs",
                json=api_body(sink.url, run_at),
                headers={"Idempotency-Key": key_on(1 - FULL, "other")},
            )
            assert other.status_code == 201, other.text

            filler.unlink()
            server = disk_servers[FULL]
            if server.pid() is None or not Path(f"/proc/{server.pid()}").exists():
                server.start()  # a WAL write that hit the full disk stops the server
            retry = key_on(FULL, "after-")

            def created() -> bool:
                resp = client.post(
                    "/api/v1/jobs",
                    json=api_body(sink.url, run_at),
                    headers={"Idempotency-Key": retry},
                )
                return resp.status_code in (200, 201)

            wait_for(created, timeout=60, what="a create on the shard once space is freed")
            back = time.monotonic() - full_at
        found = {
            key: str(job_id)
            for key, job_id in rows(
                dsns[FULL : FULL + 1],
                "SELECT idempotency_key, id FROM jobs_far UNION ALL SELECT idempotency_key, id FROM jobs",
            )
        }
        assert set(accepted) <= set(found), "a job that got a 2xx is missing"
    log = (
        disk_servers[FULL].log_file.read_text(errors="replace")
        if disk_servers[FULL].log_file.exists()
        else ""
    )
    print(
        f"\ndisk full: a {DISK_MB} MB tmpfs with {LEFT_MB} MB left took {len(accepted)} creates "
        f"({written / 2**20:.1f} MB of payload) before a 503 ({refusal.json()['detail']!r}); "
        f"server crashed: {'PANIC' in log}; creates worked again {back:.2f} s after the space was freed"
    )
