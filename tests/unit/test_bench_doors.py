"""benchmarks.doors: the order of its runs and the ratios it reports."""

from __future__ import annotations

import pytest

from benchmarks.doors import door_ratios, run_order


def test_every_door_run_sits_between_two_copy_runs() -> None:
    assert run_order("crons", 1) == ["copy", "crons", "copy"]
    assert run_order("api", 3) == ["copy", "api", "copy", "api", "copy", "api", "copy"]


def test_a_door_run_is_compared_with_the_mean_of_its_two_copy_neighbours() -> None:
    drains: list[tuple[str, float | None]] = [("copy", 30_000.0), ("crons", 27_000.0), ("copy", 24_000.0), ("crons", 30_000.0),
              ("copy", 36_000.0)]  # fmt: skip
    # 27,000 / mean(30,000, 24,000) and 30,000 / mean(24,000, 36,000).
    assert door_ratios(drains) == [1.0, 1.0]


def test_a_run_that_drained_nothing_has_no_ratio_and_spoils_no_other() -> None:
    drains = [("copy", None), ("crons", 20_000.0), ("copy", 25_000.0), ("crons", None),
              ("copy", 25_000.0)]  # fmt: skip
    assert door_ratios(drains) == [pytest.approx(0.8), None]
