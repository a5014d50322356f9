"""benchmarks.reshard's own summary: the printed line and ``report.md``.

The line and the page carry the issue's figures side by side: the move rate,
start lateness of the jobs due before and during the moves, the API's p99
and 503 share during the moves, other 5xx, and the exactly-once audit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.report import run_label

__all__ = ["reshard_line", "write_markdown"]


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.3f} %"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}/s"


def _late(report: dict[str, Any], window: str) -> dict[str, Any]:
    return (report["lateness_by_window"].get(window) or {}).get("all") or {}


def _audit_text(audit: dict[str, Any]) -> str:
    jobs = audit["jobs"]
    text = (
        f"jobs {jobs['arrived']:,}/{jobs['expected']:,} lost={jobs['lost']} "
        f"doubled={jobs['doubled']} (same attempt {jobs['doubled_same_attempt']}, "
        f"retried {jobs['doubled_retried']}) unexpected={jobs['unexpected']}"
    )
    crons = audit.get("crons")
    if crons:
        text += (
            f"; cron slots {crons['arrived']:,}/{crons['expected']:,} lost={crons['lost']} "
            f"doubled={crons['doubled_occurrences']} redelivered={crons['redelivered']}"
        )
    return text


def reshard_line(report: dict[str, Any]) -> str:
    """One line: the moves, lateness before/during, the API during, the audit."""
    moves = report["moves"]
    api = report["api_by_window"]["during"]
    before, during = _late(report, "before"), _late(report, "during")
    return (
        f"reshard[{run_label(report)}]: moves {moves['seconds']:.0f} s, "
        f"{moves['jobs_copied']:,} jobs ({moves['rows_copied']:,} rows) copied at "
        f"{_rate(moves['jobs_per_copy_second'])} jobs ({_rate(moves['rows_per_copy_second'])} rows); "
        f"lateness p50/p99 before {_s(before.get('p50'))}/{_s(before.get('p99'))} "
        f"during {_s(during.get('p50'))}/{_s(during.get('p99'))}; "
        f"api during p99 {_s(api['latency_seconds']['p99'])} 503 {_pct(api['share_503'])} "
        f"other 5xx {report['api_errors_other_than_503']}; "
        f"audit {'EXACTLY ONCE' if report['audit']['exactly_once'] else 'BROKEN'}: "
        f"{_audit_text(report['audit'])}"
    )


def write_markdown(path: Path, report: dict[str, Any]) -> Path:
    """The figures as a page: settings, moves, lateness and API by window, audit."""
    s = report["settings"]
    moves = report["moves"]
    lines = [
        f"# reshard run {s['run_id']} ({s.get('git_commit') or 'no commit'})",
        "",
        f"{run_label(report)}; {s['shards']} shards{' + 1 added' if s['moves'] else ' (no move)'}, "
        f"{s['workers']} workers, "
        f"{s['api_processes']} API process(es); {s['jobs']:,} jobs over {s['spread_minutes']:g} min, "
        f"{s['crons']:,} crons `* * * * *`, stream {s['stream_rate']:g} creates/s "
        f"(due +{s['stream_ahead_seconds']:g} s); drain {s['drain']}; mover {s['mover']}",
        "",
        "## Moves",
        "",
        "| move | state | seconds | slots | batches | jobs copied | rows copied | copy s | jobs/s (copy) | rows/s (copy) | postponed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in moves["runs"]:
        lines.append(
            f"| {m['kind']}{'' if m['drain'] is None else ' ' + str(m['drain'])} | {m['state']} | "
            f"{m['seconds']:.1f} | {m['slots_done']}/{m['slots_planned']} | {m['batches']} | "
            f"{m['jobs_copied']:,} | {m['rows_copied']:,} | {m['copy_seconds']:.1f} | "
            f"{_rate(m['jobs_per_copy_second'])} | {_rate(m['rows_per_copy_second'])} | "
            f"{m['postponed_notes']} |"
        )
    lines += [
        "",
        f"All moves: {moves['seconds']:.1f} s, {_rate(moves['jobs_per_copy_second'])} jobs "
        f"and {_rate(moves['rows_per_copy_second'])} rows a second of copying.",
        "",
        "## By window (jobs by their scheduledFor, requests by when they were due)",
        "",
        "| window | jobs | lateness p50 | p99 | max | requests | API p50 | API p99 | 503 share | other 5xx |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, late in report["lateness_by_window"].items():
        a = report["api_by_window"][name]
        all_ = late.get("all") or {}
        lines.append(
            f"| {name} | {all_.get('jobs', 0):,} | {_s(all_.get('p50'))} | {_s(all_.get('p99'))} | "
            f"{_s(all_.get('max'))} | {a['requests']:,} | {_s(a['latency_seconds']['p50'])} | "
            f"{_s(a['latency_seconds']['p99'])} | {_pct(a['share_503'])} | "
            f"{a['errors_other_than_503']} |"
        )
    audit = report["audit"]
    lines += [
        "",
        "## Exactly-once audit at the target",
        "",
        f"**{'Exactly once' if audit['exactly_once'] else 'BROKEN'}**: {_audit_text(audit)}.",
        f"Firings recorded {audit['firings_recorded']:,} (sink answered {audit['sink_firings']:,}); "
        f"backlog waited {audit['backlog']['seconds']} s, {audit['backlog']['pending_left']} left.",
        "",
    ]
    path.write_text("\n".join(lines))
    return path
