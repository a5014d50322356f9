"""Query plans that the wave depends on.

Fenced writes must find each job by primary key. Written as
``status = 'RUNNING'``, the planner once chose the partial lease index and,
with statistics taken while most rows were SCHEDULED, scanned every running
row per outcome: 98 % of a wave's database time (benchmarks/README.md).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from cluster.model import ClaimParams
from cluster.store.postgres import PgStore
from cluster.store.sql import QUERIES
from tests.helpers import job_params

pytestmark = pytest.mark.integration


def plan_nodes(plan: dict, parent: str = "") -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    """(parent node type, node) for every node of a plan."""
    nodes = [(parent, plan)]
    for child in plan.get("Plans", []):
        nodes += plan_nodes(child, plan["Node Type"])
    return nodes


async def test_fenced_writes_use_the_primary_key_in_a_wave(store: PgStore, shard_dsns: list[str]) -> None:
    due = datetime.now(UTC) - timedelta(seconds=1)
    for _ in range(4000):
        await store.create_job(0, job_params("http://x.test/", run_at=due))
    with psycopg.connect(shard_dsns[0], autocommit=True) as conn:
        conn.execute("ANALYZE jobs")  # statistics of a table full of SCHEDULED rows
    claimed = []
    while batch := await store.claim_jobs(0, ClaimParams("w", 500, 60, 0)):
        claimed += batch
    assert len(claimed) == 4000
    sample = claimed[:500]
    args = {
        "ids": [j.id for j in sample],
        "attempts": [j.attempt for j in sample],
        "outcomes": ["SUCCEEDED"] * len(sample),
        "errors": [None] * len(sample),
        "delays": [0.0] * len(sample),
        "started": [datetime.now(UTC)] * len(sample),
        "lateness": [0.0] * len(sample),
        "worker": "w",
        "now": None,
        "lease": 30.0,
        "grace": 0.0,
        "refunds": [False] * len(sample),
    }
    with psycopg.connect(shard_dsns[0]) as conn:
        for name in ("finish_jobs", "heartbeat", "release_jobs"):
            row = conn.execute(f"EXPLAIN (FORMAT JSON) {QUERIES[name]}".encode(), args).fetchone()  # type: ignore[arg-type]
            assert row is not None
            plan = row[0][0]["Plan"] if isinstance(row[0], list) else json.loads(row[0])[0]["Plan"]
            on_jobs = [
                (parent, n)
                for parent, n in plan_nodes(plan)
                if n.get("Relation Name") == "jobs" and "Scan" in n["Node Type"]
            ]
            assert on_jobs, name
            for parent, node in on_jobs:
                shown = (name, parent, node["Node Type"], node.get("Index Name"))
                # Never the partial indexes, whose row estimates go stale in a wave.
                assert node.get("Index Name") not in ("jobs_lease_idx", "jobs_due_idx"), shown
                # A scan of the whole table is fine once (a hash join on a small
                # table), never once per outcome (inside a nested loop).
                if node["Node Type"] == "Seq Scan":
                    assert parent != "Nested Loop", shown
