"""The benchmark harness works end to end, on a small scale.

A 3,000-job wave (the harness starts its own shards) and a 5-second sustained
run through the API (on shards the test suite provides, via ``--dsn``), both
through the real entry points. Checked: the report has every key, every job
asked for exists and ended SUCCEEDED according to the database, and the plot
was drawn. Nothing here asserts a speed: this machine's figures are in
benchmarks/README.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import sustained, wave
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
    assert (out / "wave.png").stat().st_size > 0


@pytest.mark.timeout(120)
def test_sustained_load_through_the_api_reports(tmp_path: Path, bench_dsns: list[str]) -> None:
    out = tmp_path / "sustained"
    argv = ["--rate", "20", "--duration", "5", "--ahead", "2", "--workers", "2", "--out", str(out)]
    for dsn in bench_dsns:
        argv += ["--dsn", dsn]
    assert sustained.main(argv) == 0
    report = _report(out)
    assert report["api"]["requested"] == 100
    assert report["jobs"] == 100, report["api"]["statuses"]
    assert report["counts"] == {"SUCCEEDED": 100}
    assert report["started_within_60s"] == 1.0
    assert report["ceiling_jobs_per_s"] is None
    api = report["api_latency_seconds"]
    assert api["p50"] is not None and api["p50"] <= api["p99"]
    assert report["settings"]["shards_given"] is True
    assert (out / "sustained.png").stat().st_size > 0
