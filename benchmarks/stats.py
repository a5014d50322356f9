"""Percentiles and per-second series: the arithmetic of every benchmark figure.

Pure functions over plain lists, so they are cheap to test and the same for
the wave and the sustained run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Timeline", "percentile", "summarize", "timeline"]

QUANTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ascending values, interpolating linearly
    between the two closest ranks (numpy's default), so p50 of [1, 2] is 1.5."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in 0..1, got {q}")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def summarize(values: Iterable[float]) -> dict[str, float | None]:
    """``{p50, p95, p99, max}``; every figure is None when there are no values."""
    ordered = sorted(values)
    if not ordered:
        return {**dict.fromkeys(QUANTILES), "max": None}
    out: dict[str, float | None] = {k: percentile(ordered, q) for k, q in QUANTILES.items()}
    out["max"] = ordered[-1]
    return out


@dataclass(frozen=True)
class Timeline:
    """Per-second bins from ``origin``: bin ``i`` covers [i, i+1) seconds."""

    seconds: list[int]
    starts: list[int]
    completions: list[int]
    lateness_p50: list[float | None]
    lateness_max: list[float | None]


def timeline(
    origin: float, started: Sequence[float], lateness: Sequence[float], finished: Sequence[float]
) -> Timeline:
    """Starts and completions per second after ``origin`` (epoch seconds), and
    the lateness of the jobs that started in each second. Events before the
    origin (a prefetched job fires a hair early) fall in bin 0."""
    if len(started) != len(lateness):
        raise ValueError("started and lateness must pair up")
    events = [*started, *finished]
    span = max(0, math.floor(max(events) - origin)) + 1 if events else 0
    starts = [0] * span
    completions = [0] * span
    late: list[list[float]] = [[] for _ in range(span)]
    for at, late_s in zip(started, lateness, strict=True):
        i = max(0, math.floor(at - origin))
        starts[i] += 1
        late[i].append(late_s)
    for at in finished:
        completions[max(0, math.floor(at - origin))] += 1
    p50: list[float | None] = []
    top: list[float | None] = []
    for bucket in late:
        bucket.sort()
        p50.append(percentile(bucket, 0.5) if bucket else None)
        top.append(bucket[-1] if bucket else None)
    return Timeline(list(range(span)), starts, completions, p50, top)
