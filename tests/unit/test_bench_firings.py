"""The reshard benchmark's audit at the target (benchmarks/firings.py) and
its figures by window: a lost job, a job two owners fired under one attempt,
a retry, a create that was refused but fired, a cron slot made twice."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import orjson

from benchmarks.createstream import StreamRequest, request_figures, status_series
from benchmarks.firings import (
    CRON,
    Firing,
    audit_crons,
    audit_jobs,
    first_arrivals,
    lateness_by_window,
    read_firings,
)
from benchmarks.shardmoves import MoveResult, move_figures

T = 1_800_000_000.0  # a whole minute (epoch seconds)


def fired(
    job: str, at: float, attempt: int = 1, kind: str = "bulk", i: int = 0, due: float = T
) -> Firing:
    return Firing(at, job, due, attempt, kind, i)


def test_the_sinks_record_reads_back_as_firings(tmp_path: Path) -> None:
    body = {
        "jobId": "job_1",
        "type": "t",
        "scheduledFor": "2027-01-15T08:00:00Z",
        "attempt": 2,
        "payload": {"k": "cron", "i": 7},
    }
    path = tmp_path / "firings.log"
    path.write_bytes(b"1800000000.250000 " + orjson.dumps(body) + b"\n")
    [f] = read_firings(path)
    due = datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()
    assert f == Firing(1_800_000_000.25, "job_1", due, 2, CRON, 7)
    assert read_firings(tmp_path / "missing.log") == []


def test_every_expected_job_once_is_exactly_once() -> None:
    audit = audit_jobs({"a": "bulk", "b": "stream"}, [fired("a", T), fired("b", T, kind="stream")])
    assert audit["exactly_once"] and audit["lost"] == 0 and audit["doubled"] == 0
    assert audit["by_kind"] == {
        "bulk": {"expected": 1, "lost": 0},
        "stream": {"expected": 1, "lost": 0},
    }


def test_lost_doubled_and_unexpected_jobs_are_each_counted() -> None:
    firings = [
        fired("two-owners", T), fired("two-owners", T + 1),  # one attempt fired twice
        fired("retried", T), fired("retried", T + 40, attempt=2),  # a lease lost, fired again
        fired("refused-but-fired", T, kind="stream", i=9),
        fired("occurrence", T, kind=CRON),  # a cron's: not a one-shot job
    ]  # fmt: skip
    answers = {("stream", 9): "503"}
    audit = audit_jobs(
        {"two-owners": "bulk", "retried": "bulk", "lost": "stream"}, firings, answers
    )
    assert not audit["exactly_once"]
    assert audit["lost"] == 1 and audit["lost_samples"] == ["lost"]
    assert audit["doubled"] == 2
    assert audit["doubled_same_attempt"] == 1 and audit["doubled_retried"] == 1
    samples = {s["jobId"]: s["attempts"] for s in audit["doubled_samples"]}
    assert samples == {"two-owners": [1, 1], "retried": [1, 2]}
    assert audit["unexpected"] == 1
    assert audit["unexpected_by_create_answer"] == {"503": 1}
    assert audit["unexpected_samples"] == [
        {"jobId": "refused-but-fired", "kind": "stream", "index": 9}
    ]


def test_a_cron_slot_is_audited_once_per_cron_and_a_second_occurrence_is_a_double() -> None:
    slots = [T, T + 60]
    firings = [
        fired("c0-1", T, kind=CRON, i=0, due=T),
        fired("c1-1", T, kind=CRON, i=1, due=T),
        fired("c0-2", T + 60, kind=CRON, i=0, due=T + 60),
        fired("c0-2bis", T + 60, kind=CRON, i=0, due=T + 60),  # two jobs, one (cron, slot)
        fired("c1-3", T + 120, kind=CRON, i=1, due=T + 120),  # past the window: not counted
    ]
    audit = audit_crons(2, slots, firings)
    assert audit["expected"] == 4 and audit["arrived"] == 3
    assert audit["lost"] == 1 and audit["lost_samples"] == [{"cron": 1, "slot": T + 60}]
    assert audit["doubled_occurrences"] == 1 and audit["redelivered"] == 0
    assert not audit["exactly_once"]
    # A double counts wherever it falls; a loss only within the slots audited.
    first = audit_crons(2, [T], firings)
    assert first["lost"] == 0 and first["doubled_occurrences"] == 1


def test_lateness_is_each_jobs_first_arrival_in_the_window_of_its_scheduled_time() -> None:
    firings = [
        fired("a", T + 0.5, due=T), fired("a", T + 30, attempt=2, due=T),
        fired("b", T + 12, kind="stream", due=T + 10),
        fired("c", T + 21, due=T + 20),
    ]  # fmt: skip
    firsts = first_arrivals(firings)
    assert sorted(f.job_id for f in firsts) == ["a", "b", "c"]
    late = lateness_by_window(
        firsts, {"before": (T, T + 10), "during": (T + 10, T + 30), "none": (0, 1)}
    )
    assert late["before"]["all"]["jobs"] == 1 and late["before"]["all"]["max"] == 0.5
    assert late["during"]["all"]["jobs"] == 2 and late["during"]["all"]["max"] == 2.0
    assert late["during"]["stream"]["jobs"] == 1 and late["during"]["bulk"]["p50"] == 1.0
    assert late["none"]["all"] == {"jobs": 0, "p50": None, "p95": None, "p99": None, "max": None}


def test_the_streams_requests_by_window_give_the_503_share_and_other_errors() -> None:
    requests = [
        StreamRequest(T + i, 0.01 * i, 0.01, status, f"j{i}" if status == "201" else None)
        for i, status in enumerate(["201", "201", "503", "201", "500", "HttpError", "201"])
    ]
    during = request_figures(requests, T + 2, T + 6)
    assert during["requests"] == 4
    assert during["statuses"] == {"503": 1, "201": 1, "500": 1, "HttpError": 1}
    assert during["share_503"] == 0.25 and during["errors_other_than_503"] == 2
    assert request_figures(requests, T + 100, T + 200)["share_503"] is None
    # Per second from the moves' start: [second, requests, 503s, other errors].
    assert status_series(requests, T + 2.5) == [
        [-3, 1, 0, 0], [-2, 1, 0, 0], [-1, 1, 1, 0], [0, 1, 0, 0], [1, 1, 0, 1], [2, 1, 0, 1],
        [3, 1, 0, 0],
    ]  # fmt: skip


def test_a_moves_rate_is_its_rows_over_its_copy_seconds() -> None:
    record = {
        "id": "m1", "kind": "rebalance", "drain": None, "state": "done", "slots_planned": 1365,
        "slots_done": 1365, "rows_copied": 40_000, "copy_seconds": 2.0, "batches": 86,
        "tables": {"jobs": 30_000, "jobs_far": 5_000, "cron_jobs": 5_000},
    }  # fmt: skip
    notes = ["postponed: 6000 jobs due", "retrying: shard down"]
    figs = move_figures(MoveResult("rebalance", T, T + 10, record, notes))
    assert figs["rows_per_copy_second"] == 20_000 and figs["jobs_per_copy_second"] == 17_500
    # As the API shows it now: camelCase.
    shown = {
        "kind": "rebalance", "state": "done", "slotsPlanned": 1365, "slotsDone": 1365,
        "rowsCopied": 40_000, "copySeconds": 2.0, "rowsByTable": record["tables"],
    }  # fmt: skip
    assert move_figures(MoveResult("rebalance", T, T + 10, shown, []))["jobs_copied"] == 35_000
    assert figs["jobs_copied"] == 35_000 and figs["rows_per_wall_second"] == 4_000
    assert figs["postponed_notes"] == 1 and figs["seconds"] == 10
