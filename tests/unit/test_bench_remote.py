"""The remote benchmark's arithmetic: lateness read from a cluster's metrics,
and the progress line a load tester watches."""

from __future__ import annotations

import io
import math

import pytest

from benchmarks.progress import Progress
from benchmarks.remote import histogram_quantile, parse_buckets
from benchmarks.report import SCHEMA_VERSION, write_report

EXPOSITION = """\
# HELP vakit_job_start_lateness_seconds Seconds between a job's run_at and the moment its target was fired.
# TYPE vakit_job_start_lateness_seconds histogram
vakit_job_start_lateness_seconds_bucket{le="1.0",shard="0",target_kind="HTTP"} 10.0
vakit_job_start_lateness_seconds_bucket{le="2.0",shard="0",target_kind="HTTP"} 30.0
vakit_job_start_lateness_seconds_bucket{le="+Inf",shard="0",target_kind="HTTP"} 40.0
vakit_job_start_lateness_seconds_bucket{le="1.0",shard="1",target_kind="HTTP"} 10.0
vakit_job_start_lateness_seconds_bucket{le="2.0",shard="1",target_kind="HTTP"} 50.0
vakit_job_start_lateness_seconds_bucket{le="+Inf",shard="1",target_kind="HTTP"} 60.0
vakit_job_start_lateness_seconds_count{shard="0",target_kind="HTTP"} 40.0
"""


def test_buckets_are_summed_over_every_label_but_le() -> None:
    assert parse_buckets(EXPOSITION) == {1.0: 20.0, 2.0: 80.0, math.inf: 100.0}


def test_quantiles_interpolate_within_a_bucket_as_prometheus_does() -> None:
    buckets = {1.0: 20.0, 2.0: 80.0, math.inf: 100.0}
    assert histogram_quantile(0.2, buckets) == pytest.approx(1.0)
    assert histogram_quantile(0.5, buckets) == pytest.approx(1.5)  # rank 50: half of (20, 80]
    assert histogram_quantile(0.1, buckets) == pytest.approx(0.5)  # from 0 in the first bucket
    assert histogram_quantile(0.99, buckets) == 2.0  # in +Inf: the highest finite bound
    assert histogram_quantile(0.5, {1.0: 0.0, math.inf: 0.0}) is None


def test_progress_says_done_total_rate_and_eta() -> None:
    out = io.StringIO()
    progress = Progress("jobs fired", 1000, stream=out, every=0)
    progress.started -= 10  # ten seconds in
    progress.update(250)
    line = out.getvalue().strip()
    assert line.startswith("jobs fired: 250/1,000 (25.0%) 25/s")
    assert "ETA 30 s" in line


def test_every_report_carries_its_schema_version(tmp_path: object) -> None:
    from pathlib import Path

    report = {
        "jobs": 1, "started_within_60s": 1.0, "lateness_seconds": {}, "drain_jobs_per_s": None,
        "ceiling_jobs_per_s": None, "peak_worker_rss_bytes": {}, "settings": {},
    }  # fmt: skip
    path = write_report(Path(str(tmp_path)), report)
    import json

    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION
