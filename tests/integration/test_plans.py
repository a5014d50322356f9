"""Query plans that the wave depends on.

Fenced writes must find each job by primary key. Written as
``status = 'RUNNING'``, the planner once chose the partial lease index and,
with statistics taken while most rows were SCHEDULED, scanned every running
row per outcome: 98 % of a wave's database time (docs/results/2026-12-07-benchmarks.md,
"What limits the drain rate").
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import shardmap
from cluster.cron.plan import cron_slot
from cluster.model import (
    ClaimedJob,
    ClaimParams,
    CronRecord,
    GetCronParams,
    JobSearchParams,
    JobStatus,
)
from cluster.store.postgres import PgStore
from cluster.store.postgres_cron import PgCronStore
from cluster.store.sql import QUERIES
from tests.helpers import cron_record, finished_history, job_params

pytestmark = pytest.mark.integration


def plan_nodes(plan: dict[str, Any], parent: str = "") -> list[tuple[str, dict[str, Any]]]:
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
            row = conn.execute(f"EXPLAIN (FORMAT JSON) {QUERIES[name]}".encode(), args).fetchone()
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


async def test_materializer_pages_by_the_keyset_index_and_locks_by_primary_key(
    store: PgStore, shard_dsns: list[str]
) -> None:
    # A wave: thousands of crons due at one instant. A page must start where
    # the last one ended inside that instant (the keyset index), and the
    # write must find each cron by primary key, never scan the table per cron.
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    crons = PgCronStore(store)
    made = [
        CronRecord(
            id=shardmap.new_uuid(cron_slot("svc", f"p{i}")), owner="svc", name=f"p{i}",
            schedule="0 0 * * *", schedule_kind="CRON", time_zone="UTC", type="p",
            target={"kind": "NOOP"}, payload=None, misfire_policy="RUN_ONCE", concurrency="ALLOW",
            jitter_seconds=0, max_attempts=3, timeout_seconds=60, starting_deadline_seconds=None,
            enabled=True, anchor=datetime(1970, 1, 1, tzinfo=UTC), next_fire_at=at, fingerprint=str(i),
        )
        for i in range(6000)
    ]  # fmt: skip
    for k in range(0, len(made), 1000):
        await crons.create_many(0, made[k : k + 1000])
    with psycopg.connect(shard_dsns[0], autocommit=True) as conn:
        conn.execute("ANALYZE cron_jobs")
    middle = sorted(c.id for c in made)[3000]
    due_args = {
        "until": at, "unsettled_until": at + timedelta(days=32), "after_at": at,
        "after_id": middle, "limit": 2000,
    }  # fmt: skip
    ids = sorted(c.id for c in made)[:2000]
    write_args = {
        "ids": ids, "expected": [at] * 2000, "next": [at + timedelta(days=1)] * 2000,
        "last_fire": [at] * 2000, "missed": [0] * 2000, "skipped": [0] * 2000, "runs": [0] * 2000,
        "cal_version": [0] * 2000, "settled": [True] * 2000,
        "occ_cron": ids, "occ_job": [uuid.uuid4() for _ in ids], "occ_scheduled": [at] * 2000,
        "occ_run_at": [at] * 2000, "occ_deadline": [None] * 2000, "now": at, "far_horizon": 3600.0,
    }  # fmt: skip
    with psycopg.connect(shard_dsns[0]) as conn:
        due = explain(conn, "due_crons", due_args)
        scans = [n for _, n in plan_nodes(due) if n.get("Relation Name") == "cron_jobs"]
        # Each branch an index scan in key order: the wave's index, and the
        # unsettled PREVIOUS_BUSINESS_DAY crons' partial one (migration 25).
        assert [(n["Node Type"], n.get("Index Name")) for n in scans] == [
            ("Index Scan", "cron_jobs_due_key_idx"),
            ("Index Scan", "cron_jobs_unsettled_idx"),
        ]
        # The keyset position is an index condition, not a filter.
        assert "id" in scans[0]["Index Cond"] and "Filter" not in scans[0]
        write = explain(conn, "materialize_crons", write_args)
        for parent, node in plan_nodes(write):
            if node.get("Relation Name") == "cron_jobs" and "Scan" in node["Node Type"]:
                shown = (parent, node["Node Type"], node.get("Index Name"))
                assert node["Node Type"] != "Seq Scan" or parent != "Nested Loop", shown
        locks = [n for _, n in plan_nodes(write) if n["Node Type"] == "LockRows"]
        assert locks and all(
            n["Plans"][0].get("Index Name") == "cron_jobs_pkey" for n in locks
        ), locks


def explain(conn: psycopg.Connection, name: str, args: dict[str, Any]) -> dict[str, Any]:
    row = conn.execute(f"EXPLAIN (FORMAT JSON) {QUERIES[name]}".encode(), args).fetchone()
    assert row is not None
    plan: dict[str, Any] = row[0][0]["Plan"] if isinstance(row[0], list) else json.loads(row[0])[0]["Plan"]
    return plan


async def test_search_reads_scheduled_jobs_from_the_owner_index_and_running_ones_too(
    store: PgStore, shard_dsns: list[str]
) -> None:
    # The hot table's owner index holds SCHEDULED rows only (a claim adds
    # no entry to it): a tenant with a few jobs among another's thousands
    # still gets its page from it, RUNNING jobs included.
    later = datetime.now(UTC) + timedelta(hours=1)
    for _ in range(3000):
        await store.create_job(0, job_params("http://x.test/", run_at=later, owner="big"))
    mine = [job_params("http://x.test/", owner="small") for _ in range(6)]
    for p in mine:
        await store.create_job(0, p)
    claimed = await store.claim_jobs(0, ClaimParams("w", 3, 60, 0))
    assert len(claimed) == 3
    with psycopg.connect(shard_dsns[0], autocommit=True) as conn:
        conn.execute("ANALYZE jobs")
    page = await store.search_jobs(0, JobSearchParams(owner="small", limit=10))
    assert [j.id for j in page] == sorted((p.id for p in mine), reverse=True)
    assert sorted(j.status.value for j in page) == ["RUNNING"] * 3 + ["SCHEDULED"] * 3
    for status in (JobStatus.RUNNING, JobStatus.SCHEDULED):
        got = await store.search_jobs(0, JobSearchParams(owner="small", statuses=(status,), limit=10))
        assert len(got) == 3 and {j.status for j in got} == {status}
    args = {
        "owner": "small", "before": uuid.UUID(int=(1 << 128) - 1), "type": None, "cron_id": None,
        "run_from": datetime(1970, 1, 1, tzinfo=UTC), "run_to": datetime(9999, 1, 1, tzinfo=UTC),
        "finished": None, "finished_from": datetime(1970, 1, 1, tzinfo=UTC),
        "ran_from": datetime(1970, 1, 1, tzinfo=UTC), "finished_to": datetime(9999, 1, 1, tzinfo=UTC),
        "limit": 10, "labels": None,
    }  # fmt: skip
    # A label filter has no index of its own: the page still comes from the owner index.
    for labels in (None, '{"team": "payments"}'):
        with psycopg.connect(shard_dsns[0]) as conn:
            plan = explain(conn, "search_jobs", {**args, "labels": labels})
        on_jobs = {n.get("Index Name") for _, n in plan_nodes(plan) if n.get("Relation Name") == "jobs"}
        assert "jobs_owner_idx" in on_jobs, (labels, on_jobs)
    with psycopg.connect(shard_dsns[0]) as conn:
        (indexdef,) = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'jobs_owner_idx'"
        ).fetchone() or ("",)
    assert "WHERE ((status)::text = 'SCHEDULED'" in indexdef, indexdef


def fold_explained(dsn: str, limit: int, read: int) -> tuple[int, int, bool, float]:
    """One fold call as the store makes it (the history's new BRIN ranges
    summarized first), run and committed under EXPLAIN ANALYZE: the history
    rows it examined (those its scans returned, and those a lossy BRIN range
    made it read and recheck), the rows it kept, `more`, and the next
    window's width."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(QUERIES["summarize_history"])
        row = conn.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {QUERIES['fold_cron_successes']}".encode(),
            {"lag": 0, "limit": limit, "read": read},
        ).fetchone()
        more, width = conn.execute(
            "SELECT folded_until < now() - interval '1 second', slice_seconds FROM cron_success_fold"
        ).fetchone() or (True, 0.0)
    assert row is not None
    plan = row[0][0]["Plan"]
    # Partitions the window's bounds prune away run no loop.
    read_nodes = [
        n for _, n in plan_nodes(plan)
        if str(n.get("Relation Name", "")).startswith("job_history") and n.get("Actual Loops", 1)
    ]  # fmt: skip
    assert read_nodes and all(n["Node Type"] in ("Bitmap Heap Scan", "Index Scan") for n in read_nodes), [
        (n["Relation Name"], n["Node Type"], n.get("Actual Rows")) for n in read_nodes
    ]
    loops = [n.get("Actual Loops", 1) for n in read_nodes]
    kept = sum(n["Actual Rows"] * k for n, k in zip(read_nodes, loops, strict=True))
    rechecked = sum(n.get("Rows Removed by Index Recheck", 0) * k for n, k in zip(read_nodes, loops, strict=True))
    return kept + rechecked, kept, bool(more), float(width)


async def test_a_fold_reads_a_window_of_the_history_whose_width_follows_its_rows(
    store: PgStore, shard_dsns: list[str]
) -> None:
    # A wave of plain jobs finished after the watermark, one cron
    # occurrence in 68 among them, 10 ms apart, never vacuumed (so the BRIN
    # index has no summary of them until the fold makes one). Migration 18
    # took the fold's index of cron rows away (every finished occurrence
    # paid an entry in it): a call reads a window of time by the BRIN
    # index, not every row after the watermark.
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=8)
    finishes = [
        (uuid.uuid4() if k % 68 == 0 else None, base + timedelta(milliseconds=10 * k))  # 597 crons'
        for k in range(40_600)
    ]
    finished_history(shard_dsns[0], finishes, folded_until=base - timedelta(milliseconds=10))
    with psycopg.connect(shard_dsns[0], autocommit=True) as conn:
        conn.execute("ANALYZE job_history")
        (pages,) = conn.execute(
            "SELECT sum(relpages) FROM pg_class WHERE relname LIKE 'job\\_history\\_%' AND relkind = 'r'"
        ).fetchone() or (0,)
    # A BRIN range is 128 pages: a window may read up to a range's rows on
    # either side of it.
    per_range = 128 * len(finishes) // max(int(pages), 1)
    assert per_range < len(finishes) // 4, per_range
    # The first window (slice_seconds' default, 1 s) holds 100 rows, a
    # cron's or two among them, of the 40,600.
    examined, kept, more, width = fold_explained(shard_dsns[0], limit=2_000, read=10_000)
    assert more and kept <= 101 and examined <= kept + 2 * per_range, (examined, kept, per_range)
    # Then it widens twofold a call while a window holds fewer than 10,000
    # rows (100 s of them), and each call reads its own window.
    widths, calls = [width], 1
    while more and calls < 30:
        examined, kept, more, width = fold_explained(shard_dsns[0], limit=2_000, read=10_000)
        widths.append(width)
        calls += 1
        assert kept <= 2 * 10_000 and examined <= kept + 2 * per_range, (examined, kept, per_range)
    assert not more and calls < 30, widths
    assert widths[:5] == [2.0, 4.0, 8.0, 16.0, 32.0] and max(widths) >= 64.0, widths
    # Caught up: 20,000 rows finished since the watermark, in a fraction of
    # a second. That call reads them all, and the next window is narrowed
    # at once to about 10,000 rows at their density: half the time since
    # the watermark, not half the last width.
    with psycopg.connect(shard_dsns[0]) as conn:
        (mark,) = conn.execute("SELECT folded_until FROM cron_success_fold").fetchone() or (base,)
    step = (datetime.now(UTC) - mark) / 20_001
    finished_history(
        shard_dsns[0], [(None, mark + step * (k + 1)) for k in range(20_000)], folded_until=mark
    )
    examined, kept, more, width = fold_explained(shard_dsns[0], limit=2_000, read=10_000)
    assert kept >= 20_000 and width < widths[-1] / 20, (kept, width, widths[-1])


def history_rows_read(dsn: str, name: str, args: dict[str, Any]) -> int:
    """The history rows a statement read, the functions it calls included:
    its transaction's own counts of tuples fetched and scanned in the day
    partitions (pg_stat_xact_user_tables)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(QUERIES[name].encode(), args).fetchall()
        row = conn.execute(
            "SELECT coalesce(sum(seq_tup_read + idx_tup_fetch), 0) FROM pg_stat_xact_user_tables"
            " WHERE relname LIKE 'job\\_history\\_%'"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_crons_read_looks_only_at_the_history_after_the_folds_watermark(
    store: PgStore, shard_dsns: list[str]
) -> None:
    # A cron's read (get, by name, a page of the list) puts what finished
    # after the fold's watermark over its folded last success and result
    # (cron_recent_success, cron_recent_result). The history's cron index
    # is by (cron_id, scheduled_for), so the watermark must prune the day
    # partitions before it at run time: a minutely cron keeps 43,200 runs
    # in 30 days, and a read must not grow with them. Here 9,000 runs over
    # the days before yesterday, and one after the watermark. Before
    # migration 19 each of the two functions read all 9,001.
    pg = PgCronStore(store)
    now = datetime.now(UTC).replace(microsecond=0)
    record = cron_record("svc", "busy", next_fire_at=now + timedelta(days=1))
    await pg.create_many(0, [record])
    with psycopg.connect(shard_dsns[0], autocommit=True) as conn:
        conn.execute(
            "SELECT vakit_ensure_day_partitions('job_history', (now() AT TIME ZONE 'UTC')::date - 5,"
            " (now() AT TIME ZONE 'UTC')::date + 1)"
        )
    start = now - timedelta(days=4)
    runs = [(record.id, start + timedelta(seconds=25 * k)) for k in range(9_000)]  # to 1.4 days ago
    newest = now - timedelta(seconds=30)
    finished_history(
        shard_dsns[0], [*runs, (record.id, newest)], folded_until=now - timedelta(minutes=1)
    )
    with psycopg.connect(shard_dsns[0], autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE job_history")
    args = {"id": record.id, "owner": "svc"}
    after_watermark = history_rows_read(shard_dsns[0], "get_cron", args)
    found = await pg.get(0, GetCronParams(record.id, "svc"))
    assert found is not None and found.last_success_at == newest
    # The same read with nothing folded reads every run, in both functions.
    with psycopg.connect(shard_dsns[0], autocommit=True) as conn:
        conn.execute("UPDATE cron_success_fold SET folded_until = '-infinity'")
    everything = history_rows_read(shard_dsns[0], "get_cron", args)
    assert after_watermark <= 10 and everything >= 2 * 9_001, (after_watermark, everything)


async def test_a_crons_readers_of_the_hot_table_use_its_indexes_in_a_wave(
    store: PgStore, shard_dsns: list[str]
) -> None:
    # The cron index holds SCHEDULED rows only (migration 16): a claim adds
    # no entry to it. Its readers still read by index with a wave of cron
    # occurrences in the hot table, 3,000 of them in flight: by the cron
    # index, the REPLACE index, or the lease index (the jobs in flight),
    # never a scan of the whole table.
    due = datetime.now(UTC) - timedelta(seconds=1)
    crons = [uuid.uuid4() for _ in range(6000)]
    with psycopg.connect(shard_dsns[0], autocommit=True) as conn:
        conn.execute(
            """INSERT INTO jobs (id, owner_service, type, cron_id, scheduled_for, run_at, max_attempts,
                                 timeout_seconds, target_kind, target, payload, concurrency)
               SELECT gen_random_uuid(), 'svc', 't', c, %(due)s, %(due)s, 3, 30, 'NOOP', '{}', '{}',
                      CASE WHEN n %% 3 = 0 THEN 'REPLACE' ELSE 'ALLOW' END
                 FROM unnest(%(crons)s::uuid[]) WITH ORDINALITY AS v(c, n)""",
            {"due": due, "crons": crons},
        )
        conn.execute("ANALYZE jobs")  # statistics of a table full of SCHEDULED rows
    claimed: list[ClaimedJob] = []
    while len(claimed) < 3000 and (batch := await store.claim_jobs(0, ClaimParams("w", 500, 60, 0))):
        claimed += batch
    with psycopg.connect(shard_dsns[0], autocommit=True) as conn:
        (indexdef,) = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'jobs_cron_idx'"
        ).fetchone() or ("",)
    assert "(status)::text = 'SCHEDULED'" in indexdef, indexdef
    one = claimed[0].cron_id
    far = datetime(9999, 1, 1, tzinfo=UTC)
    statements: dict[str, dict[str, Any]] = {
        "crons_pending": {"ids": crons[:100], "finished": [False] * 100},
        "cron_runs": {"id": one, "limit": 20},
        "revoke_replaced": {"cron_id": one, "keep": claimed[0].id, "now": None},
        "cancel_cron_occurrences": {"id": one},
        "search_jobs_of_cron": {
            "owner": "svc", "before": uuid.UUID(int=(1 << 128) - 1), "type": None, "cron_id": one,
            "status": None, "run_from": datetime(1970, 1, 1, tzinfo=UTC), "run_to": far, "finished": None,
            "finished_from": datetime(1970, 1, 1, tzinfo=UTC), "finished_to": far, "limit": 10,
            "labels": None,
        },
    }  # fmt: skip
    with psycopg.connect(shard_dsns[0]) as conn:
        for name, args in statements.items():
            plan = explain(conn, name, args)
            conn.rollback()
            on_jobs = [n for _, n in plan_nodes(plan) if n.get("Relation Name") == "jobs"]
            assert on_jobs, name
            assert all(n["Node Type"] != "Seq Scan" for n in on_jobs), (
                name, [(n["Node Type"], n.get("Index Name")) for n in on_jobs],
            )  # fmt: skip
            if name == "revoke_replaced":  # at every start of a REPLACE occurrence
                read = {n.get("Index Name") for n in on_jobs if "Scan" in n["Node Type"]}
                assert read == {"jobs_replace_idx"}, read  # not the lease index: every running row



# The janitor's purges on a shard of 200,000 rows, the oldest 20,000 past
# the retention, and 100,000 pending jobs in each of the hot and far
# tables: per query, the table purged, how its rows are made, and the
# index that must find the old ones.
PURGES = {
    # Migration 17's BRIN index: ledger rows go in creation order.
    "purge_cron_occurrences": (
        "cron_occurrences",
        "INSERT INTO cron_occurrences (cron_id, scheduled_for, job_id, created_at)"
        " SELECT gen_random_uuid(), t, gen_random_uuid(), t FROM {rows}",
        "cron_occurrences_created_brin",
    ),
    "purge_job_keys": (
        "job_keys",
        "INSERT INTO job_keys (owner_service, idempotency_key, job_id, fingerprint, created_at)"
        " SELECT 'svc', t::text, gen_random_uuid(), 'fp', t FROM {rows}",
        "job_keys_created_idx",
    ),
}


@pytest.mark.parametrize("query", sorted(PURGES))
async def test_a_purge_batch_reads_the_old_rows_and_looks_their_jobs_up(
    query: str, shard_dsns: list[str], store: PgStore
) -> None:
    # A batch reads about its own rows, not the 180,000 others, and looks
    # each one's job up by primary key: written NOT EXISTS, the planner
    # made hash anti-joins that read the whole hot and far tables a batch.
    table, fill, index = PURGES[query]
    now = datetime.now(UTC)
    start = now - timedelta(days=60)
    rows = "(SELECT %(start)s + i * interval '20 s' AS t FROM generate_series(1, 200000) AS i) r"
    with psycopg.connect(shard_dsns[0], autocommit=True) as conn:
        for pending in ("jobs", "jobs_far"):
            conn.execute(
                f"INSERT INTO {pending} (id, owner_service, type, scheduled_for, run_at, max_attempts,"
                "                        timeout_seconds, target_kind, target, payload)"
                " SELECT gen_random_uuid(), 'svc', 't', %(now)s, %(now)s, 3, 30, 'NOOP', '{}', '{}'"
                "   FROM generate_series(1, 100000)",
                {"now": now},
            )
        conn.execute(
            "INSERT INTO job_history (id, owner_service, type, scheduled_for, run_at, status, attempt,"
            "                         max_attempts, timeout_seconds, target_kind, target, payload,"
            "                         created_at, finished_at)"
            " SELECT gen_random_uuid(), 'svc', 't', %(now)s, %(now)s, 'SUCCEEDED', 1, 3, 30, 'NOOP',"
            "        '{}', '{}', %(now)s, %(now)s FROM generate_series(1, 100000)",
            {"now": now},
        )
        conn.execute(fill.format(rows=rows), {"start": start})
        conn.execute("VACUUM ANALYZE")
        # The history's days but today's are empty: the planner may scan those.
        empty = {r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid"
            " WHERE c.relname LIKE 'job_history%%' AND c.reltuples <= 0"
        )}  # fmt: skip
    before = start + timedelta(seconds=20 * 20_000)  # the first 20,000 rows
    with psycopg.connect(shard_dsns[0]) as conn:  # rolled back below
        row = conn.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {QUERIES[query]}".encode(), {"before": before, "limit": 10_000}
        ).fetchone()
        conn.rollback()
    assert row is not None
    nodes = [n for _, n in plan_nodes(row[0][0]["Plan"])]
    scans = [(n["Node Type"], n.get("Relation Name") or n.get("Index Name")) for n in nodes]
    print(f"\n{query}: {scans}")
    own = {n["Index Name"] for n in nodes if str(n.get("Index Name")).startswith(table)}
    assert own == {index}, scans
    assert not any(n["Node Type"] == "Seq Scan" and n["Relation Name"] == table for n in nodes), scans
    read = sum(n["Actual Rows"] * n.get("Actual Loops", 1) for n in nodes if n.get("Relation Name") == table)
    assert read <= 2 * 10_000, scans
    lookups = [n for n in nodes if str(n.get("Relation Name")).startswith(("jobs", "job_history"))]
    assert lookups and all(
        n["Node Type"] in ("Index Scan", "Index Only Scan") or n["Relation Name"] in empty for n in lookups
    ), scans
