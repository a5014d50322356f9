"""The console's lateness chart (``/ui/cluster``): a sparkline of start
lateness by minute, drawn by the server as SVG coordinates, and how a
lateness reads for people."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from cluster.api.operator_schemas import LatenessMinuteOut

__all__ = ["CHART_H", "CHART_W", "LATENESS_MINUTES", "chart", "seconds_text"]

# The lateness chart: the last this many minutes, drawn this large (px).
LATENESS_MINUTES = 15
CHART_W, CHART_H = 300, 64


def chart(
    series: list[LatenessMinuteOut], last: datetime, width: int, height: int
) -> dict[str, Any]:
    """A sparkline of p50 and p99 by minute, as SVG coordinates: drawn by the
    server, so the page loads no chart library. x is the minute (the
    window's first at 0, the current one at ``width``), y the seconds (the
    window's worst p99 at the top). A minute without attempts has no point."""
    first = last - timedelta(minutes=LATENESS_MINUTES - 1)
    top = max((m.p99Seconds for m in series), default=0.0) or 1.0
    step = width / (LATENESS_MINUTES - 1)

    def points(values: list[tuple[datetime, float]]) -> list[tuple[float, float]]:
        return [
            (
                round((at - first).total_seconds() / 60 * step, 1),
                round(height - v / top * height, 1),
            )
            for at, v in values
            if first <= at <= last
        ]

    p50 = points([(m.minute, m.p50Seconds) for m in series])
    p99 = points([(m.minute, m.p99Seconds) for m in series])
    return {
        "width": width, "height": height, "top": top, "first": first, "last": last,
        "p50": p50, "p99": p99,
        "p50_line": " ".join(f"{x},{y}" for x, y in p50),
        "p99_line": " ".join(f"{x},{y}" for x, y in p99),
    }  # fmt: skip


def seconds_text(value: float | None) -> str:
    """A lateness for people: milliseconds below a second, else seconds."""
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"
