"""benchmarks.doors: the order of its runs, their options and the ratios it reports."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from benchmarks.doors import door_ratios, run_options, run_order
from benchmarks.harness import ClusterSpec
from benchmarks.wave import WaveOptions, due_at, parse_args, schedule_wave


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


def test_copy_runs_carry_the_doors_wave_and_against_crons_its_whole_minute(tmp_path: Path) -> None:
    opts = WaveOptions(cluster=ClusterSpec(out=tmp_path), lead=480.0)
    door = run_options(opts, "crons", door="crons", plain_copy=False, out=tmp_path / "1")
    assert (door.source, door.lead, door.copy_as_doors, door.due_on_minute) == (
        "crons", 480.0, False, False)  # fmt: skip
    assert door.cluster.out == tmp_path / "1"
    copy = run_options(opts, "copy", door="crons", plain_copy=False, out=tmp_path / "0")
    # The COPY takes its own lead, and lands on a whole minute as the crons wave does.
    assert (copy.lead, copy.copy_as_doors, copy.due_on_minute) == (None, True, True)
    # The batch API's wave is due a lead ahead, not on a minute: so is its COPY.
    api_copy = run_options(opts, "copy", door="api", plain_copy=False, out=tmp_path / "0")
    assert (api_copy.copy_as_doors, api_copy.due_on_minute) == (True, False)
    plain = run_options(opts, "copy", door="crons", plain_copy=True, out=tmp_path / "0")
    assert (plain.copy_as_doors, plain.due_on_minute) == (False, False)


def test_a_wave_due_on_the_minute_waits_for_the_first_whole_minute_past_its_lead() -> None:
    now = datetime(2026, 12, 7, 6, 27, 9, 250_000, tzinfo=UTC)
    assert due_at(now, 33.0) == now + timedelta(seconds=33)
    assert due_at(now, 33.0, on_minute=True) == datetime(2026, 12, 7, 6, 28, tzinfo=UTC)


@pytest.mark.parametrize(
    ("source", "flag", "on_minute"),
    [("copy", False, False), ("copy", True, True), ("api", False, False), ("api", True, True),
     ("crons", False, True)],
)  # fmt: skip
def test_every_door_schedules_its_wave_by_the_flag_and_crons_always_on_the_minute(
    tmp_path: Path, source: str, flag: bool, on_minute: bool
) -> None:
    opts, _ = parse_args(["--source", source, "--lead", "30", "--out", str(tmp_path)]
                         + (["--due-on-minute"] if flag else []))  # fmt: skip
    assert opts.on_minute is on_minute
    now, t_due, lead = schedule_wave(opts, default_lead=999.0)  # --lead wins
    assert lead == round((t_due - now).total_seconds(), 1)
    if on_minute:
        assert (t_due.second, t_due.microsecond) == (0, 0) and 30 <= lead < 90
    else:
        assert t_due == now + timedelta(seconds=30)
    # Without --lead, the source's own lead.
    _, _, lead = schedule_wave(replace(opts, lead=None), default_lead=120.0)
    assert 120 <= lead < 180 if on_minute else lead == 120.0
