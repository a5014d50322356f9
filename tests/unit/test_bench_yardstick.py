"""The machine's yardstick that every benchmark report carries: its shape and
how a summary line shows it. No figure of it is asserted: it measures the
machine, which tests never judge."""

from __future__ import annotations

from typing import Any

from benchmarks import yardstick
from benchmarks.report import summary_line


def test_both_measures_are_taken_and_named() -> None:
    stick = yardstick.measure()
    assert set(stick) == {"cpu_ms", "cpu_ms_best", "first_touch_s_per_gib"}
    assert all(isinstance(v, float) and v > 0 for v in stick.values()), stick
    assert stick["cpu_ms_best"] <= stick["cpu_ms"], stick  # the best round and the median


def test_a_smaller_region_and_fewer_rounds_still_measure() -> None:
    assert yardstick.first_touch_s_per_gib(nbytes=4 * 2**20) > 0
    median, best = yardstick.cpu_ms(seconds=0.0)  # one round at least
    assert median == best > 0


def test_a_summary_line_ends_with_the_yardstick_or_says_it_has_none() -> None:
    report: dict[str, Any] = {
        "jobs": 10,
        "started_within_60s": 1.0,
        "lateness_seconds": {"p50": 0.01, "p95": 0.02, "p99": 0.03, "max": 0.04},
        "drain_jobs_per_s": 100.0,
        "ceiling_jobs_per_s": None,
        "peak_worker_rss_bytes": {"max_process": 2**20, "sum": 2**21},
        "settings": {
            "source": "copy",
            "db": "durable",
            "knobs": "defaults",
            "machine": {
                "cores": 2,
                "yardstick": {
                    "cpu_ms": 41.26,
                    "cpu_ms_best": 30.4,
                    "first_touch_s_per_gib": 1.2345,
                },
            },
        },
    }
    line = summary_line("wave", report)
    assert line.endswith("cores=2 yardstick=cpu:41ms(best 30),touch:1.23s/GiB"), line
    del report["settings"]["machine"]["yardstick"]["cpu_ms_best"]  # a report of 8d880d6
    assert summary_line("wave", report).endswith("cores=2 yardstick=cpu:41ms,touch:1.23s/GiB")
    del report["settings"]["machine"]["yardstick"]  # a report from before the yardstick
    assert summary_line("wave", report).endswith("cores=2 yardstick=-")
