"""Growing a running cluster under load, with the mover's process SIGKILLed
in the middle of a move (issue 42).

Real processes: two workers and an API on two shards, ZooKeeper, an HTTP
target that records every firing. A third database is added with
``POST /api/v1/shards``, a rebalance starts, and the API process running the
mover is SIGKILLed once slots have moved; a new API process takes the mover
lock and finishes the move. Keyed creates run the whole time.

Invariants: one job per key (a 503 during the move wrote nothing: sent again
it makes the job once); every job fired, none twice; the map ends even; and
every pending row sits on exactly the shard the map names.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import shardmap
from cluster.local.pgserver import PgServer
from tests.helpers import wait_for
from tests.integration.test_cli import as_json, ok, vakit
from tests.load import Load
from tests.pgfixtures import drop_databases
from tests.procs import TOKEN, FaultSink, ProcessHarness, VakitProcess
from tests.shards import rows

pytestmark = pytest.mark.faults

MOVABLE = "SELECT id FROM jobs UNION ALL SELECT id FROM jobs_far"
# The fault harness's token is an operator's (tests/procs.py).
AS_OPERATOR = {"VAKIT_TOKEN": TOKEN}
HELD = (
    "SELECT 1 FROM jobs WHERE id = %(id)s UNION ALL SELECT 1 FROM jobs_far WHERE id = %(id)s"
    " UNION ALL SELECT 1 FROM job_history WHERE id = %(id)s"
)


@pytest.fixture
def new_dsn(pg_servers: list[PgServer]) -> Iterator[str]:
    dsn = pg_servers[1].create_database(f"grow_{uuid.uuid4().hex[:10]}")
    yield dsn
    drop_databases([dsn])


def client(base_url: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)


def status(base_url: str) -> dict[str, Any]:
    with client(base_url) as c:
        got = c.get("/api/v1/shards")
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        return body


def test_a_mover_killed_mid_move_loses_and_doubles_nothing(
    procs: ProcessHarness, sink: FaultSink, zk_connect: str, new_dsn: str
) -> None:
    """SIGKILL of the API process running the mover; a new one resumes it."""

    def kill(api: VakitProcess) -> None:
        api.sigkill()

    move_through_a_fault(procs, sink, zk_connect, new_dsn, kill, drain=True)


def test_a_mover_paused_past_its_session_is_fenced_out(
    procs: ProcessHarness, sink: FaultSink, zk_connect: str, new_dsn: str
) -> None:
    """SIGSTOP of the API running the mover for longer than its ZooKeeper
    session: the session expires, the lock goes to a new API process, which
    finishes the move; the paused one wakes, finds its lock gone and writes
    nothing (no slot ends fenced on its owner, none served twice)."""
    paused: list[VakitProcess] = []

    def pause(api: VakitProcess) -> None:
        api.sigstop()
        paused.append(api)

    move_through_a_fault(procs, sink, zk_connect, new_dsn, pause, zk_session_timeout=4)
    (api,) = paused
    api.sigcont()
    time.sleep(6.0)  # it wakes, notices its session is gone, and must touch nothing
    dsns = [*procs.shards, new_dsn]
    final = status_of_shards(procs, new_dsn)
    for shard, dsn in enumerate(dsns):
        fenced = {slot for (slot,) in rows([dsn], "SELECT slot FROM slot_fences")}
        owned = set(final[shard])
        assert not fenced & owned, (shard, sorted(fenced & owned)[:5])


def status_of_shards(procs: ProcessHarness, new_dsn: str) -> dict[int, list[int]]:
    """Each shard's slots, from the map the running API reports."""
    live = next(p for p in reversed(procs.processes) if p.role == "api" and p.alive())
    out: dict[int, list[int]] = {}
    for first, last, shard in status(live.base_url)["runs"]:
        out.setdefault(shard, []).extend(range(first, last + 1))
    return out


def move_through_a_fault(
    procs: ProcessHarness,
    sink: FaultSink,
    zk_connect: str,
    new_dsn: str,
    fault: Callable[[VakitProcess], None],
    drain: bool = False,
    **settings: Any,
) -> None:
    """Add a shard and rebalance under keyed load, with ``fault`` done to the
    API running the mover midway; with ``drain``, then drain the new shard
    out again with the CLI (``vakit shards drain 2 --wait``). The audit
    follows: one job per key, each fired once, no row on two shards."""
    # Small batches, so that the fault lands between two of them or inside one.
    api = procs.api(zk=zk_connect, reshard_batch_slots=64, **settings)
    workers = [procs.worker(f"worker-{c}", zk=zk_connect) for c in "ab"]
    api.wait_ready()
    for w in workers:
        w.wait_ready()

    with Load(api.base_url, sink.url) as load:
        wait_for(lambda: len(load.answers) >= 100, timeout=30, what="load before the move")
        with client(api.base_url) as c:
            added = c.post("/api/v1/shards", json={"dsn": new_dsn})
            assert added.status_code == 201, added.text
            assert added.json()["shard"] == 2
            started = c.post("/api/v1/shards/rebalance")
            assert started.status_code == 202, started.text
        wait_for(
            lambda: (status(api.base_url)["move"] or {}).get("slotsDone", 0) >= 128,
            timeout=60,
            interval=0.05,
            what="slots moved before the fault",
        )
        fault(api)
        again = procs.api("api-2", start=False, zk=zk_connect, reshard_batch_slots=64, **settings)
        again.start().wait_ready()
        load.base_url = again.base_url
        wait_for(
            lambda: status(again.base_url)["move"]["state"] == "done",
            timeout=120,
            what="the move resumed and done",
        )
        moved = status(again.base_url)
        shown = as_json(vakit("shards", "status", "-o", "json", api=again, env=AS_OPERATOR))
        assert shown["epoch"] == moved["epoch"] and shown["move"]["state"] == "done"
        if drain:
            out = ok(vakit("shards", "drain", "2", "--wait", api=again, env=AS_OPERATOR))
            assert "slot map epoch" in out
            drained = status(again.base_url)
            assert [s["slots"] for s in drained["shards"]][2] == 0
            assert drained["move"]["kind"] == "drain" and drained["move"]["state"] == "done"
        time.sleep(1.0)  # creates on the final map too
    assert moved["epoch"] > 1 and sorted(s["slots"] for s in moved["shards"]) == [1365, 1365, 1366]
    statuses = {s for s, _ in load.answers.values()}
    assert statuses <= {0, 200, 201, 503}, statuses

    # Every key not answered with a job is sent again: it makes its job once.
    jobs = {k: j for k, (_, j) in load.answers.items() if j}
    with client(again.base_url) as c:
        for key, (code, _) in list(load.answers.items()):
            if key in jobs:
                continue
            resp = c.post("/api/v1/jobs", json=load.body(key), headers={"Idempotency-Key": key})
            assert resp.status_code in (200, 201), (code, resp.text)
            jobs[key] = resp.json()["jobId"]
        # GET names the shard that holds the job now.
        dsns = [*procs.shards, new_dsn]
        for job in list(jobs.values())[-30:]:
            got = c.get(f"/api/v1/jobs/{job}")
            assert got.status_code == 200, got.text
            jid = shardmap.decode_id("job", job)
            holders = [i for i, dsn in enumerate(dsns) if rows([dsn], HELD, {"id": jid})]
            assert holders == [got.json()["shard"]], (job, holders, got.json()["shard"])
    assert len(set(jobs.values())) == len(jobs)

    # Everything fires, each job once.
    wait_for(lambda: set(jobs.values()) <= sink.job_ids(), timeout=90, what="every job fired")
    time.sleep(2.0)
    fired = sink.by_job()
    doubled = {j: [f.attempt for f in fs] for j, fs in fired.items() if len(fs) > 1}
    assert not doubled, doubled
    left = rows(dsns, MOVABLE)
    assert len(left) == len({r[0] for r in left})  # no row on two shards
    keys = rows(dsns, "SELECT idempotency_key FROM job_keys WHERE idempotency_key LIKE 'load-%'")
    assert len(keys) == len({k for (k,) in keys}) == len(jobs)
