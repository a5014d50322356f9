"""benchmarks.console at a small size: it loads what it says, signs in and
gets every page it times (the figures themselves go to its report, never
into a test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import console

pytestmark = pytest.mark.integration


def test_console_benchmark_loads_the_tenant_and_gets_every_page(tmp_path: Path) -> None:
    argv = ["--crons", "40", "--history", "4000", "--days", "2", "--repeat", "1",
            "--unsafe-fast-db", "--out", str(tmp_path)]  # fmt: skip
    assert console.main(argv) == 0
    [path] = tmp_path.glob("console-*.json")
    report = json.loads(path.read_text())
    assert report["shard0_rows"]["crons"] == 40 and report["shard0_rows"]["history"] == 4000
    # Every job that ran has its attempt (SUCCEEDED and FAILED: 98 in 100).
    assert report["shard0_rows"]["attempts"] == 3920
    pages = {p["path"]: p for p in report["pages"]}
    assert {"/ui/crons", "/ui/jobs", "/ui/dead-letters", "/ui/cluster"} <= set(pages)
    # The page after report-000020: report-000021 to report-000039, and a header row.
    assert pages["/ui/crons?after=report-000020"]["rows"] == 20
    assert len(report["pages"]) == 13 and all(p["median_ms"] > 0 for p in report["pages"])
    # The first crons page lists the 40 crons (a header row and one a cron).
    assert pages["/ui/crons"]["rows"] == 41
    assert pages["/ui/dead-letters"]["rows"] >= 2
