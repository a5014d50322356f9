"""benchmarks.search at a small size runs to its end: it loads the
history, times the store call, EXPLAINs the statement the store runs for
status=FAILED, and gets every page it times through the API (a drifted
argument list once crashed it after the load; the figures go to the
docs, docs/api.md, never into a test)."""

from __future__ import annotations

import pytest

from benchmarks import search

pytestmark = pytest.mark.integration


def test_search_benchmark_runs_every_step(capsys: pytest.CaptureFixture[str]) -> None:
    search.main(["--rows", "3000", "--repeat", "2", "--limit", "10", "--no-durable"])
    out = capsys.readouterr().out
    assert "loaded 3,000 history rows" in out
    for step in (
        "store.search_jobs status=FAILED",
        "EXPLAIN ANALYZE status=FAILED",
        "status=FAILED, first page",
        "status=FAILED&type=SETTLE, first page",
        "status=FAILED, walking pages by cursor",
    ):
        assert step in out, f"{step!r} missing from:\n{out}"
