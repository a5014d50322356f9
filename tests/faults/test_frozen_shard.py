"""A shard whose PostgreSQL is frozen: the postmaster and every server
process SIGSTOPped, as a paused VM or a stuck disk looks from outside. The
kernel still accepts connections and acknowledges every packet, so no TCP
timeout, keepalive or ``tcp_user_timeout`` ever fires, and the server's own
``statement_timeout`` cannot (it is frozen): only the client's deadline ends
a wait (issue 46: 15 s a request on a default cluster, then 5 s each).

With the API's default settings, every request for the frozen shard is a
503 with Retry-After within the API's shard bound (``api_shard_timeout``,
2.5 s; asserted under a correctness bound of 5 s, not timed as a
benchmark), the other shard answers as usual, and the worker keeps firing
the other shard's jobs on time. Thawed, the shard serves again. Times are
printed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from cluster.local.pgserver import PgServer
from tests.faults.test_postgres_crash import children
from tests.faults.test_worker_faults import assert_unavailable, key_on
from tests.helpers import wait_for
from tests.procs import TOKEN, FaultSink, ProcessHarness
from tests.shards import api_body

pytestmark = pytest.mark.faults

FROZEN = 1
UP = 0
# The API's default api_shard_timeout is 2.5 s; this is what the test
# holds it to on a busy 2-core machine.
BOUND = 5.0


@contextmanager
def frozen(server: PgServer) -> Iterator[list[int]]:
    """The server's postmaster and all its processes SIGSTOPped for the
    block, SIGCONTed after it however it ends."""
    pid = server.pid()
    assert pid is not None, "the server is not running"
    stopped = [pid, *children(pid)]
    for p in stopped:
        os.kill(p, signal.SIGSTOP)
    try:
        yield stopped
    finally:
        for p in stopped:
            try:
                os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass


def timed(call: object) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    resp = call() if callable(call) else call
    assert isinstance(resp, httpx.Response)
    return resp, time.monotonic() - started


def test_a_frozen_shard_costs_a_bounded_wait_and_the_other_keeps_its_pace(
    own_servers: list[PgServer], own_procs: ProcessHarness, sink: FaultSink
) -> None:
    api = own_procs.api()  # the default api_shard_timeout: the point of the test
    worker = own_procs.worker("worker-a")
    api.wait_ready()
    worker.wait_ready()
    client = httpx.Client(
        base_url=api.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
    )
    later = datetime.now(UTC) + timedelta(days=1)
    with client:
        ids = {}
        for shard in (UP, FROZEN):
            resp = client.post(
                "/api/v1/jobs",
                json=api_body(sink.url, later),
                headers={"Idempotency-Key": key_on(shard, "frozen-before")},
            )
            assert resp.status_code == 201, resp.text
            ids[shard] = resp.json()["jobId"]

        waits: list[float] = []
        other: list[float] = []
        due: list[tuple[str, float]] = []  # job, when due (time.monotonic())
        with frozen(own_servers[FROZEN]):
            started = time.monotonic()
            # Pooled connections first, then new ones (which connect to a
            # kernel that accepts and a server that never answers).
            for i in range(2):
                resp, took = timed(lambda: client.get(f"/api/v1/jobs/{ids[FROZEN]}"))
                assert_unavailable(resp, FROZEN)
                waits.append(took)
                resp, took = timed(
                    lambda i=i: client.post(
                        "/api/v1/jobs",
                        json=api_body(sink.url, later),
                        headers={"Idempotency-Key": key_on(FROZEN, f"frozen-during-{i}")},
                    )
                )
                assert_unavailable(resp, FROZEN)
                waits.append(took)
                resp, took = timed(lambda: client.get(f"/api/v1/jobs/{ids[UP]}"))
                assert resp.status_code == 200, resp.text
                other.append(took)
                run_at, when = datetime.now(UTC) + timedelta(seconds=1), time.monotonic() + 1
                resp, took = timed(
                    lambda i=i, run_at=run_at: client.post(
                        "/api/v1/jobs",
                        json=api_body(sink.url, run_at),
                        headers={"Idempotency-Key": key_on(UP, f"up-during-{i}")},
                    )
                )
                assert resp.status_code == 201, resp.text
                other.append(took)
                due.append((resp.json()["jobId"], when))
            # The worker fires the other shard's jobs on time all along.
            wait_for(
                lambda: {job for job, _ in due} <= sink.job_ids(),
                timeout=15,
                what="the other shard's jobs to fire during the freeze",
            )
            fired = {f.job_id: f.received_at for f in sink.snapshot()}
            late = [fired[job] - when for job, when in due]  # both monotonic
            frozen_for = time.monotonic() - started
            assert worker.alive() and api.alive()
        thawed = time.monotonic()
        wait_for(
            lambda: client.get(f"/api/v1/jobs/{ids[FROZEN]}").status_code == 200,
            timeout=30,
            what="the API to serve the thawed shard",
        )
        back = time.monotonic() - thawed

    assert max(waits) <= BOUND, waits
    assert max(late) < 3.0, late
    print(
        f"\nfrozen shard {FROZEN} ({frozen_for:.1f} s): its requests took "
        f"{', '.join(f'{w:.2f}' for w in waits)} s (503 each); the other shard's "
        f"{max(other) * 1000:.0f} ms at most; its jobs fired "
        f"{', '.join(f'{d:+.2f}' for d in late)} s from runAt; served {back:.2f} s after the thaw"
    )
