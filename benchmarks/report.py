"""Report output shared by every benchmark: ``report.json``, the one-line
summary, and the timeline plot.

Every report has the same top-level keys (``REPORT_KEYS``); a figure that does
not apply to a benchmark is ``null`` rather than missing, so tools reading
reports need no special cases.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

from benchmarks import yardstick
from benchmarks.stats import Timeline

__all__ = [
    "REPORT_KEYS",
    "SCHEMA_VERSION",
    "headline",
    "machine_info",
    "plot_timeline",
    "run_label",
    "summary_line",
    "write_report",
]

# Bumped when a key changes meaning or goes away (adding one does not):
# tools reading report.json check it. 2: schema_version itself, remote runs.
SCHEMA_VERSION = 2

REPORT_KEYS = (
    "jobs",
    "started_within_60s",
    "lateness_seconds",
    "drain_jobs_per_s",
    "ceiling_jobs_per_s",
    "peak_worker_rss_bytes",
    "settings",
)


def machine_info() -> dict[str, Any]:
    """The machine, as a run starts: call it before the run starts anything,
    so its load average and its yardstick are the hour's, not the run's."""
    import psutil

    return {
        "cores": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "yardstick": yardstick.measure(),
    }


def headline(
    benchmark: str,
    jobs: int,
    figs: dict[str, Any],
    ceiling_jobs_per_s: float | None,
    peak_worker_rss_bytes: dict[str, int],
) -> dict[str, Any]:
    """The first keys of every report: which benchmark, and the figures
    ``REPORT_KEYS`` promises (``figs`` is :func:`benchmarks.outcomes.figures`)."""
    return {
        "benchmark": benchmark,
        "jobs": jobs,
        "started_within_60s": figs["started_within_60s"],
        "lateness_seconds": figs["lateness_seconds"],
        "drain_jobs_per_s": figs["drain_jobs_per_s"],
        "ceiling_jobs_per_s": ceiling_jobs_per_s,
        "peak_worker_rss_bytes": peak_worker_rss_bytes,
    }


def write_report(out: Path, report: dict[str, Any]) -> Path:
    missing = [k for k in REPORT_KEYS if k not in report]
    if missing:
        raise ValueError(f"report lacks {missing}")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    report = {"schema_version": SCHEMA_VERSION, **report}
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return path


def _fmt_s(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def _fmt_rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}/s"


def run_label(report: dict[str, Any]) -> str:
    """Which door made the jobs, on which database settings, with which
    worker knobs: every printed figure carries it, so a figure is never read
    without knowing what produced it."""
    settings = report.get("settings", {})
    label = (
        f"source={settings.get('source', '-')} db={settings.get('db', '-')} "
        f"knobs={settings.get('knobs', '-')}"
    )
    checkpoint = settings.get("checkpoint_before_claims")
    if checkpoint is not None and not checkpoint.get("done"):
        label += " checkpoint=none"  # the wave's pages paid no full-page images (wave.py)
    return label


def _create_part(create: dict[str, Any]) -> str:
    cpu = create.get("api_cpu_us_per_item")
    mode = create["mode"] if create["mode"] == "single" else f"batch {create['batch']}"
    return (
        f"create={_fmt_rate(create.get('items_per_s'))}({create['door']} {mode}, "
        f"{create['accepted']:,}/{create['requested']:,} accepted"
        + (f", api cpu {cpu:.0f}us/item" if cpu is not None else "")
        + ")"
    )


def _occurrence_part(occ: dict[str, Any]) -> str:
    last = occ.get("last_created_vs_slot_seconds")
    seen = (occ.get("visible") or {}).get("seen_all_vs_slot_seconds")
    return (
        f"occurrences={occ['jobs']:,}/{occ['expected']:,}"
        f"(all before T: {'yes' if occ['all_created_before_slot'] else 'NO'}"
        f", last created {'-' if last is None else f'{last:+.1f}s'} vs T"
        f", all visible {'-' if seen is None else f'{seen:+.1f}s'} vs T)"
    )


def summary_line(name: str, report: dict[str, Any]) -> str:
    late = report["lateness_seconds"]
    within = report["started_within_60s"]
    rss = report["peak_worker_rss_bytes"] or {}
    parts = [
        f"{name}[{run_label(report)}]: jobs={report['jobs']:,}",
        f"within60s={within * 100:.2f}%" if within is not None else "within60s=-",
        "lateness p50/p95/p99/max="
        + "/".join(_fmt_s(late.get(k)) for k in ("p50", "p95", "p99", "max")),
        f"drain={_fmt_rate(report['drain_jobs_per_s'])}",
        f"ceiling={_fmt_rate(report['ceiling_jobs_per_s'])}",
        f"peak_rss={rss.get('max_process', 0) / 2**20:.0f}MB"
        f"(sum {rss.get('sum', 0) / 2**20:.0f}MB)",
    ]
    per_job = (report.get("usage") or {}).get("cpu_us_per_job") or {}
    if per_job:
        parts.append(
            "cpu/job=" + ",".join(f"{k}:{v:.0f}us" for k, v in per_job.items() if k != "harness")
        )
    if report.get("create"):
        parts.append(_create_part(report["create"]))
    if report.get("occurrences"):
        parts.append(_occurrence_part(report["occurrences"]))
    api = report.get("api_latency_seconds")
    if api:
        parts.append(
            "api p50/p95/p99=" + "/".join(_fmt_s(api.get(k)) for k in ("p50", "p95", "p99"))
        )
    machine = report["settings"].get("machine", {})
    parts.append(f"cores={machine.get('cores')}")
    parts.append(yardstick.describe(machine.get("yardstick")))
    usage = report.get("usage") or {}
    if "cpu_speed" in usage:  # a wave's: the machine's speed while it drained
        parts.append(yardstick.describe_speed(usage["cpu_speed"]))
    return " ".join(parts)


def plot_timeline(path: Path, series: Timeline, title: str, origin_label: str) -> Path:
    """Starts (and completions) per second, and the lateness of each second's
    starts, against seconds since the origin."""
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    top.bar(series.seconds, series.starts, width=1.0, align="edge", label="starts/s", alpha=0.7)
    # One more edge so that the last second's step is drawn as wide as its bar.
    top.step(
        [*series.seconds, len(series.seconds)],
        [*series.completions, series.completions[-1] if series.completions else 0],
        where="post",
        color="tab:green",
        label="completions/s",
    )
    top.set_ylabel("jobs per second")
    top.legend(loc="upper right")
    top.set_title(title)
    xs_p50 = [s for s, v in zip(series.seconds, series.lateness_p50, strict=True) if v is not None]
    p50 = [v for v in series.lateness_p50 if v is not None]
    top_late = [v for v in series.lateness_max if v is not None]
    # Marked points: a wave that starts within one second has one point per
    # line, and a line through one point is not drawn.
    bottom.plot(xs_p50, p50, marker="o", markersize=4, label="p50 lateness of the second's starts")
    bottom.plot(xs_p50, top_late, marker="o", markersize=4, label="max lateness", color="tab:red")
    bottom.axhline(60, color="grey", linestyle="--", linewidth=0.8, label="60 s")
    bottom.set_ylabel("start lateness (s)")
    bottom.set_xlabel(f"seconds since {origin_label}")
    bottom.legend(loc="best")
    if top_late and max(top_late) < 60:
        bottom.set_ylim(0, max(max(top_late) * 1.1, 0.1))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
