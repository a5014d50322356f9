"""The machine's yardstick that every benchmark report carries: its shape and
how a summary line shows it. No figure of it is asserted: it measures the
machine, which tests never judge."""

from __future__ import annotations

import time
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


def _wave_report(machine: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fields of a wave's report that a summary line reads."""
    report: dict[str, Any] = {
        "jobs": 10,
        "started_within_60s": 1.0,
        "lateness_seconds": {"p50": 0.01, "p95": 0.02, "p99": 0.03, "max": 0.04},
        "drain_jobs_per_s": 100.0,
        "ceiling_jobs_per_s": None,
        "peak_worker_rss_bytes": {"max_process": 2**20, "sum": 2**21},
        "settings": {"source": "copy", "db": "durable", "knobs": "defaults", "machine": machine},
    }
    if usage is not None:
        report["usage"] = usage
    return report


def test_a_summary_line_ends_with_the_yardstick_or_says_it_has_none() -> None:
    stick = {"cpu_ms": 41.26, "cpu_ms_best": 30.4, "first_touch_s_per_gib": 1.2345}
    report = _wave_report({"cores": 2, "yardstick": stick})
    line = summary_line("wave", report)
    assert line.endswith("cores=2 yardstick=cpu:41ms(best 30),touch:1.23s/GiB"), line
    del report["settings"]["machine"]["yardstick"]["cpu_ms_best"]  # a report of 8d880d6
    assert summary_line("wave", report).endswith("cores=2 yardstick=cpu:41ms,touch:1.23s/GiB")
    del report["settings"]["machine"]["yardstick"]  # a report from before the yardstick
    assert summary_line("wave", report).endswith("cores=2 yardstick=-")


def test_a_speed_probe_reads_from_start_to_stop_and_says_so() -> None:
    probe = yardstick.SpeedProbe(interval=0.01).start()
    deadline = time.monotonic() + 5.0
    while len(probe.rounds) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    speed = probe.stop()
    assert speed is not None
    taken = speed["rounds"]
    assert taken == len(speed["rounds_ms"]) >= 3, speed
    assert speed["cpu_ms_best"] <= speed["cpu_ms"] <= speed["cpu_ms_p90"], speed
    time.sleep(0.05)
    assert len(probe.rounds) == taken  # stopped: no round after stop()
    assert probe.stop() == speed  # a second stop (the wave's exit callback) changes nothing


def test_a_probe_stopped_before_it_started_has_no_readings() -> None:
    assert yardstick.SpeedProbe().stop() is None
    assert yardstick.describe_speed(None) == "speed_in_drain=-"


def test_a_waves_summary_line_gives_its_speed_in_the_drain() -> None:
    speed = {"cpu_ms": 14.2, "cpu_ms_p90": 22.6, "cpu_ms_best": 13.1, "rounds": 80}
    report = _wave_report({"cores": 2}, {"cpu_us_per_job": {"workers": 30.0}, "cpu_speed": speed})
    line = summary_line("wave", report)
    assert line.endswith("yardstick=- speed_in_drain=cpu:14ms(p90 23)"), line
    del report["usage"]["cpu_speed"]  # a report from before the probe, or not a wave's
    assert summary_line("wave", report).endswith("yardstick=-")
