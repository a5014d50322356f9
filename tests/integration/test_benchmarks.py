"""The benchmark harness works end to end, on a small scale.

A wave through each door (COPY, the batch create API, crons that the
materializer turns into jobs; the harness starts its own shards) and a
5-second sustained run through the API, single and batched (on shards the
test suite provides, via ``--dsn``), all through the real entry points.
Checked: the report has every key, every job asked for exists and ended
SUCCEEDED exactly once (one job per item, one attempt each, one occurrence
per cron) according to the database, the report says which door and which
database settings were used, and the plot was drawn. Nothing here asserts a
speed: this machine's figures are in the results log, docs/results/.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from benchmarks import doors, sustained, wave
from benchmarks.bulk import JobSpec, copy_jobs
from benchmarks.cronwave import DEFAULT_ZONES, slot_at_least, zone_schedules
from benchmarks.harness import BenchCluster, ClusterSpec
from benchmarks.report import REPORT_KEYS
from benchmarks.stats import percentile, summarize, timeline
from cluster.local.pgserver import PgServer
from tests.pgfixtures import clone_databases, drop_databases

pytestmark = pytest.mark.integration


def _report(out: Path) -> dict[str, Any]:
    path = out / "report.json"
    assert path.exists(), f"no {path}"
    report: dict[str, Any] = json.loads(path.read_text())
    missing = [k for k in REPORT_KEYS if k not in report]
    assert not missing, f"report lacks {missing}"
    return report


@pytest.fixture
def bench_dsns(pg_servers: list[PgServer]) -> Iterator[list[str]]:
    dsns = clone_databases(pg_servers)
    yield dsns
    drop_databases(dsns)


def test_percentiles_interpolate_between_ranks() -> None:
    assert percentile([1.0, 2.0], 0.5) == 1.5
    assert percentile([5.0], 0.99) == 5.0
    values = [float(i) for i in range(1, 101)]
    assert summarize(values) == pytest.approx(
        {"p50": 50.5, "p95": 95.05, "p99": 99.01, "max": 100.0}
    )
    assert summarize([]) == {"p50": None, "p95": None, "p99": None, "max": None}


def test_timeline_bins_per_second_from_the_origin() -> None:
    series = timeline(100.0, [99.9, 100.2, 101.5], [0.0, 0.2, 1.5], [100.3, 101.6, 102.0])
    assert series.starts == [2, 1, 0]
    assert series.completions == [1, 1, 1]
    assert series.lateness_max == [0.2, 1.5, None]


def test_cron_wave_slot_is_a_whole_minute_at_least_the_lead_ahead() -> None:
    now = datetime(2026, 11, 30, 21, 8, 50, 500_000, tzinfo=UTC)
    assert slot_at_least(now, 10) == datetime(2026, 11, 30, 21, 10, tzinfo=UTC)
    assert slot_at_least(now, 9.5) == datetime(2026, 11, 30, 21, 9, tzinfo=UTC)


def test_cron_wave_zones_share_one_instant_and_a_dst_overlap_is_left_out() -> None:
    slot = datetime(2026, 11, 30, 21, 10, tzinfo=UTC)
    now = slot - timedelta(minutes=1)
    schedules = zone_schedules(slot, DEFAULT_ZONES, now)
    assert schedules["UTC"] == "10 21 * * *"
    assert schedules["Europe/Istanbul"] == "10 0 * * *"
    assert schedules["Asia/Kolkata"] == "40 2 * * *"
    assert schedules["Asia/Kathmandu"] == "55 2 * * *"
    assert set(schedules) == set(DEFAULT_ZONES)
    # 06:30 UTC on 2026-11-01 is New York's second 01:30 (EST): a fixed-time
    # schedule fires at the first one (EDT, 05:30 UTC), so that zone is out.
    overlap = datetime(2026, 11, 1, 6, 30, tzinfo=UTC)
    zones = ("UTC", "America/New_York")
    assert zone_schedules(overlap, zones, overlap - timedelta(hours=2)) == {"UTC": "30 6 * * *"}


@pytest.mark.timeout(120)
def test_wave_runs_every_job_once_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "wave"
    code = wave.main(
        ["--jobs", "3000", "--shards", "2", "--workers", "2", "--out", str(out), "--lead", "4"]
    )
    assert code == 0
    report = _report(out)
    assert report["jobs"] == 3000
    assert sum(report["settings"]["load_per_shard"]) == 3000
    # From the database: every job is in history as SUCCEEDED, none pending.
    assert report["counts"] == {"SUCCEEDED": 3000}
    assert report["started_within_60s"] == 1.0
    late = report["lateness_seconds"]
    assert set(late) == {"p50", "p95", "p99", "max"}
    assert late["p50"] <= late["p95"] <= late["p99"] <= late["max"]
    assert report["drain_jobs_per_s"] > 0
    assert report["ceiling_jobs_per_s"] > 0
    assert report["ceilings"]["naive"]["jobs"] == 3000
    rss = report["peak_worker_rss_bytes"]
    assert 0 < rss["max_process"] <= rss["sum"]
    assert report["settings"]["machine"]["cores"] >= 1
    # The hour's speed, measured as the run started (benchmarks/yardstick.py).
    stick = report["settings"]["machine"]["yardstick"]
    assert set(stick) == {"cpu_ms", "cpu_ms_best", "first_touch_s_per_gib"}, stick
    assert 0 < stick["cpu_ms_best"] <= stick["cpu_ms"] and stick["first_touch_s_per_gib"] > 0, stick
    assert (out / "wave.png").stat().st_size > 0
    # The default door and the durable default, said in the report.
    assert report["source"] == report["settings"]["source"] == "copy"
    assert report["settings"]["knobs"] == "defaults"
    assert report["settings"]["durable"] is True
    pg = report["settings"]["postgresql"]["settings"]
    assert (pg["fsync"], pg["synchronous_commit"], pg["full_page_writes"]) == ("on", "on", "on")
    assert report["create"] is None and report["occurrences"] is None
    # A checkpoint between the rows and the claims, as a deployment has one.
    checkpoint = report["settings"]["checkpoint_before_claims"]
    assert checkpoint["done"] is True and checkpoint["seconds"] >= 0, checkpoint
    # PostgreSQL's CPU split by process kind adds up to the group's.
    usage = report["usage"]
    kinds = usage["postgres_cpu_seconds_by_kind"]
    assert kinds["backends"] > 0, kinds
    assert set(kinds) <= {"backends", "autovacuum", "checkpointer", "bgwriter", "walwriter"}
    assert sum(kinds.values()) == pytest.approx(usage["cpu_seconds"]["postgres"], abs=0.05)
    # The WAL the wave wrote, per shard: records, full-page images, bytes.
    wal = report["wal"]
    assert len(wal["per_shard"]) == 2
    assert all(s["wal_records"] > 0 and s["wal_bytes"] > 0 for s in wal["per_shard"]), wal
    assert wal["bytes_per_job"] > 0 and wal["checkpoints_requested"] >= 0


def _assert_ran_once(report: dict[str, Any], jobs: int) -> None:
    """Every job asked for is in history as SUCCEEDED, none pending, none
    doubled, each after one attempt."""
    assert report["jobs"] == jobs
    assert report["counts"] == {"SUCCEEDED": jobs}
    assert report["retried_jobs"] == 0
    assert report["started_within_60s"] is not None
    late = report["lateness_seconds"]
    assert late["p50"] is not None and late["p50"] <= late["p99"] <= late["max"]
    created = report["rows_created"]
    assert created["first_vs_due_seconds"] <= created["last_vs_due_seconds"]


def _assert_created(create: dict[str, Any], door: str, items: int) -> None:
    assert create["door"] == door
    # The batch endpoint, not the single-create fallback.
    assert create["mode"] == "batch", create
    assert create["requested"] == create["accepted"] == create["created"] == items, create
    assert create["statuses"] == {"201": items}
    assert create["requests"] >= -(-items // create["batch"])
    assert create["items_per_s"] > 0
    assert create["api_cpu_seconds"] is not None and create["api_cpu_us_per_item"] > 0


@pytest.mark.timeout(180)
def test_wave_through_the_batch_api_runs_every_job_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "wave-api"
    argv = ["--source", "api", "--jobs", "2000", "--owners", "3", "--create-batch", "300"]
    argv += ["--clients", "4", "--ceiling", "none", "--unsafe-fast-db", "--no-checkpoint"]
    assert wave.main([*argv, "--out", str(out)]) == 0
    # Progress without -v, while creating and while draining.
    captured = capsys.readouterr()
    err = captured.err
    assert "jobs answered: 2,000/2,000 (100.0%)" in err and "ETA" in err, err
    assert "jobs finished: 2,000/2,000 (100.0%)" in err, err
    # A wave left without its checkpoint says so in its summary line.
    assert "knobs=defaults checkpoint=none]" in captured.out, captured.out
    report = _report(out)
    _assert_ran_once(report, 2000)
    _assert_created(report["create"], "jobs", 2000)
    settings = report["settings"]
    assert settings["source"] == "api" and settings["owners"] == 3
    assert settings["durable"] is False and settings["db"].startswith("unsafe-fast")
    assert settings["postgresql"]["settings"]["fsync"] == "off"
    assert settings["checkpoint_before_claims"] == {"done": False, "why": "--no-checkpoint"}
    assert report["occurrences"] is None
    assert (out / "wave.png").stat().st_size > 0


@pytest.mark.timeout(300)
def test_doors_runs_the_door_between_two_copy_waves_and_reports_the_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "doors"
    argv = ["--door", "api", "--rounds", "1", "--jobs", "1000", "--owners", "2"]
    argv += ["--ceiling", "none", "--unsafe-fast-db", "--no-checkpoint", "--out", str(out)]
    assert doors.main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["order"] == ["copy", "api", "copy"]
    assert report["copy"] == "as the door's wave and cluster"
    # Three waves of their own, each run to the end, each with its report.
    for run, source in zip(report["runs"], report["order"], strict=True):
        assert run["source"] == source
        assert run["drain_jobs_per_s"] > 0 and run["started_within_60s"] == 1.0
        inner = _report(Path(run["out"]))
        assert inner["source"] == source and inner["counts"] == {"SUCCEEDED": 1000}
        # The COPYed waves are the door's: its two owners' rows, its API
        # process running beside the workers.
        assert (inner["settings"]["owners"], inner["settings"]["api_processes"]) == (2, 1)
        assert inner["settings"]["copy_as_doors"] is (True if source == "copy" else None)
        # The batch API's wave is due a lead ahead, not on a minute: so is its COPY.
        assert inner["settings"]["due_on_minute"] is False
        assert inner["drain_jobs_per_s"] == run["drain_jobs_per_s"]
        assert run["yardstick"] == inner["settings"]["machine"]["yardstick"] is not None
        # ... and the machine's speed while it drained, each round's in its own report.
        speed = inner["usage"]["cpu_speed"]
        assert speed["rounds"] == len(speed["rounds_ms"]) >= 1
        assert run["cpu_speed"] == {k: v for k, v in speed.items() if k != "rounds_ms"}
    copy_before, door, copy_after = (r["drain_jobs_per_s"] for r in report["runs"])
    ratio = door / ((copy_before + copy_after) / 2)
    assert report["drain_vs_copy"] == [pytest.approx(ratio, abs=1e-3)]
    assert report["drain_vs_copy_median"] == pytest.approx(ratio, abs=1e-3)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and lines[-1].startswith("doors[api vs copy]: jobs=1,000"), lines
    # Each run's line says how fast the machine was as it started.
    assert all(" yardstick=cpu:" in line for line in lines[:3]), lines
    assert all(" speed_in_drain=cpu:" in line for line in lines[:3]), lines
    assert " speed_in_drain(cpu ms)=" in lines[-1], lines


@pytest.mark.timeout(240)
def test_wave_made_by_crons_runs_one_occurrence_per_cron(tmp_path: Path) -> None:
    # T is the first whole minute at least 10 s ahead, so this waits 10-70 s
    # for the slot; 1,000 crons of 3 owners across the default time zones,
    # each following its owner's holiday calendar (--calendar, issue 45).
    out = tmp_path / "wave-crons"
    argv = ["--source", "crons", "--jobs", "1000", "--owners", "3", "--lead", "10", "--calendar"]
    argv += ["--ceiling", "none", "--unsafe-fast-db", "--out", str(out)]
    assert wave.main(argv) == 0
    report = _report(out)
    _assert_ran_once(report, 1000)
    _assert_created(report["create"], "cron-jobs", 1000)
    occ = report["occurrences"]
    # One occurrence per cron for the slot, across every shard.
    assert occ["expected"] == occ["crons_defined"] == occ["jobs"] == occ["distinct_crons"] == 1000
    assert sum(s["jobs"] for s in occ["per_shard"]) == 1000
    for key in ("created_before_slot", "first_created_vs_slot_seconds", "visible"):
        assert key in occ
    assert isinstance(occ["all_created_before_slot"], bool)
    schedules = report["settings"]["cron_schedules"]
    assert len(schedules) >= 4 and "Asia/Kolkata" in schedules
    due = datetime.fromisoformat(report["settings"]["due_at"])
    assert due.second == 0 and due.microsecond == 0
    assert report["settings"]["calendar"] == {
        "excluded_days": 60, "calendar": "wave-holidays", "calendarPolicy": "NEXT_BUSINESS_DAY",
    }  # fmt: skip


@pytest.mark.timeout(120)
def test_sustained_load_through_the_api_reports(
    tmp_path: Path, bench_dsns: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sustained"
    argv = ["--rate", "20", "--duration", "5", "--ahead", "2", "--workers", "2", "--out", str(out)]
    for dsn in bench_dsns:
        argv += ["--dsn", dsn]
    assert sustained.main(argv) == 0
    err = capsys.readouterr().err  # progress without -v, while loading and while draining
    assert "jobs answered: 100/100 (100.0%)" in err and "jobs finished: 100/100" in err, err
    report = _report(out)
    assert report["api"]["requested"] == 100
    assert report["jobs"] == 100, report["api"]["statuses"]
    assert report["counts"] == {"SUCCEEDED": 100}
    assert report["started_within_60s"] == 1.0
    assert report["ceiling_jobs_per_s"] is None
    api = report["api_latency_seconds"]
    assert api["p50"] is not None and api["p50"] <= api["p99"]
    assert report["settings"]["shards_given"] is True
    assert report["api"]["mode"] == "single" and report["api"]["requests"] == 100
    assert (out / "sustained.png").stat().st_size > 0


@pytest.mark.timeout(120)
def test_sustained_load_through_the_batch_api_reports(
    tmp_path: Path, bench_dsns: list[str]
) -> None:
    out = tmp_path / "sustained-batch"
    argv = ["--rate", "50", "--duration", "4", "--ahead", "2", "--batch", "10"]
    argv += ["--workers", "1", "--out", str(out)]
    for dsn in bench_dsns:
        argv += ["--dsn", dsn]
    assert sustained.main(argv) == 0
    report = _report(out)
    assert report["api"]["mode"] == "batch" and report["api"]["batch"] == 10
    assert report["api"]["requests"] == 20
    assert report["jobs"] == 200, report["api"]["statuses"]
    assert report["counts"] == {"SUCCEEDED": 200}
    assert report["retried_jobs"] == 0
    assert report["settings"]["source"] == "api:batch(10)"


def test_floor_measures_both_apps_and_leaves_no_table(bench_dsns: list[str]) -> None:
    import socket
    import subprocess
    import sys

    import psycopg

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.floor", "--dsn", bench_dsns[0], "--rate", "100",
         "--duration", "1", "--port", str(port)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split("]")[0] for line in lines] == ["floor[bare", "floor[insert"]
    assert all("server cpu/request:" in line for line in lines)
    with psycopg.connect(bench_dsns[0]) as conn:
        assert conn.execute("SELECT to_regclass('bench_floor')").fetchone() == (None,)


def test_copy_gives_several_owners_their_rows_in_runs_as_batches_leave_them(
    bench_dsns: list[str],
) -> None:
    spec = JobSpec(
        owner="unused", type="t", run_at=datetime.now(UTC) + timedelta(hours=1),
        target={"kind": "NOOP"},
    )  # fmt: skip
    load = copy_jobs(bench_dsns, 60, spec, owners=["a", "b", "c"], run=4)
    assert load.total == 60
    for dsn, rows in zip(bench_dsns, load.per_shard, strict=True):
        with psycopg.connect(dsn) as conn:
            got = [r[0] for r in conn.execute("SELECT owner_service FROM jobs ORDER BY ctid")]
        assert got == ["abc"[k // 4 % 3] for k in range(rows)], got


@pytest.mark.parametrize(
    ("flags", "mode", "jobs"),
    [(["--creates", "20"], "single", 20), (["--batches", "2", "--batch", "10"], "batch", 20)],
)
def test_instructions_counts_the_api_under_callgrind(
    tmp_path: Path, flags: list[str], mode: str, jobs: int
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.instructions", *flags, "--out", str(tmp_path / "run"),
         "--json", str(tmp_path / "figures.json")],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"instructions[{mode}]:"), done.stdout
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["mode"] == mode and figures["jobs"] == jobs
    # Counted over the measured requests only: a create costs the API
    # hundreds of thousands of instructions, not the millions of its start.
    assert 10_000 < figures["instructions_per_job"] < 5_000_000
    assert abs(figures["instructions"] / jobs - figures["instructions_per_job"]) <= 1
    assert figures["settings"]["durable"] is True and "yardstick" in figures["settings"]["machine"]
    # The dump it read is there to be opened with callgrind_annotate.
    assert list((tmp_path / "run" / "callgrind").glob("callgrind.out.*.1"))


def test_statement_stats_sum_time_buffers_and_wal_over_the_shards(tmp_path: Path) -> None:
    # --pg-stats: each statement's counters, summed over the shards the
    # harness started with pg_stat_statements, as the report writes them.
    spec = ClusterSpec(out=tmp_path, shards=2, workers=0, statement_stats=True, zookeeper=False)
    with BenchCluster(spec) as cluster:
        dsns = cluster.start_shards()
        cluster.reset_statement_stats()
        for dsn in dsns:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE stats_probe (n int)")
                for _ in range(3):
                    conn.execute("INSERT INTO stats_probe SELECT generate_series(1, 100)")
        top = cluster.statement_stats(limit=20)
    assert top is not None
    [insert] = [e for e in top if e["query"].startswith("INSERT INTO stats_probe")]
    assert (insert["calls"], insert["rows"]) == (6, 600)
    assert insert["wal_records"] >= 600
    assert isinstance(insert["wal_bytes"], int) and insert["wal_bytes"] > 0
    assert insert["shared_blks_hit"] + insert["shared_blks_read"] > 0
    assert insert["mean_ms"] == round(insert["total_ms"] / 6, 3)
    json.dumps(top)  # what the report writes


def test_batched_ceiling_drains_every_row_through_the_store_contract(
    bench_dsns: list[str], tmp_path: Path
) -> None:
    # The batched mode claims and finishes through PgStore (the claim
    # contract), never with SQL of its own: its arguments once drifted from
    # claim_jobs' and the mode failed at its first claim.
    from benchmarks.ceiling import measure_ceiling

    result = measure_ceiling(
        bench_dsns, rows=400, drivers=2, batch=50, mode="batched", owner="bench-ceiling",
        log_dir=tmp_path,
    )  # fmt: skip
    assert (result.rows, result.jobs) == (400, 400)
    finished = 0
    for dsn in bench_dsns:
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
            row = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE status = 'SUCCEEDED' AND attempt = 1)"
                " FROM job_history WHERE owner_service = 'bench-ceiling'"
            ).fetchone()
        assert row is not None and row[0] == row[1]
        finished += row[0]
    assert finished == 400
