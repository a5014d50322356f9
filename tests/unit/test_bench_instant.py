"""benchmarks.instant: a wave's instant in one worker process, through the
worker's own wheel and firing path."""

from __future__ import annotations

import pytest

from benchmarks import instant


async def test_every_held_job_starts_at_or_after_its_instant() -> None:
    # More than a slice (5,000): the sliced start, the collector pause and
    # the held-back metrics all run.
    p99, last = await instant.one_instant(6_000)
    assert 0.0 <= p99 <= last < 30.0


def test_it_prints_each_round_and_the_median(capsys: pytest.CaptureFixture[str]) -> None:
    instant.main(["--jobs", "500", "--rounds", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert all(line.startswith("instant[jobs=500]: ") and line.endswith("us a start") for line in lines)
    assert "median" in lines[-1]
