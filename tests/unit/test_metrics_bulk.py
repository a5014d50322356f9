"""observe_many gives the exposition that one observe() per value gives.

It reaches into prometheus-client's histogram child; a version of the
library that lays its buckets out otherwise fails here, not in production.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest

from cluster import metrics
from cluster.model import ClaimedJob
from cluster.targets import FireResult
from cluster.worker.firings import FiringMetrics

_BUCKETS = (0.005, 0.01, 0.5, 1, 1.5, 10, 60)


def _histogram() -> tuple[CollectorRegistry, Histogram]:
    registry = CollectorRegistry()
    return registry, Histogram("h", "h", ["k"], buckets=_BUCKETS, registry=registry)


def _exposition(registry: CollectorRegistry) -> tuple[list[str], float]:
    """The lines but _created (construction time) and _sum, and the sum,
    which adds the same values in another order (equal to rounding)."""
    lines = generate_latest(registry).decode().splitlines()
    total = next(float(line.split()[-1]) for line in lines if line.startswith("h_sum"))
    return [line for line in lines if "_created" not in line and "_sum" not in line], total


@pytest.mark.parametrize("seed", range(5))
def test_the_same_buckets_sum_and_count_as_one_observe_each(seed: int) -> None:
    rng = random.Random(seed)
    # Values on the bounds (le is inclusive), between them, past the last
    # bound (+Inf), and zero.
    values = [rng.choice([0.0, 0.005, 0.5, 1.0, 60.0, 61.0, 1e6]) for _ in range(200)]
    values += [rng.uniform(0, 100) for _ in range(500)]
    one, h1 = _histogram()
    for v in values:
        h1.labels("a").observe(v)
    many, h2 = _histogram()
    metrics.observe_many(h2.labels("a"), values[:300])
    metrics.observe_many(h2.labels("a"), values[300:])
    metrics.observe_many(h2.labels("a"), [])
    lines_many, sum_many = _exposition(many)
    lines_one, sum_one = _exposition(one)
    assert lines_many == lines_one
    assert sum_many == pytest.approx(sum_one, rel=1e-12)


async def test_a_wave_of_firings_is_counted_once_each() -> None:
    """FiringMetrics groups a pass's firings by series: each firing still
    counts once in the lateness histogram, the call histogram and the
    per-target counter."""
    def count(name: str, **labels: str) -> float:
        value = REGISTRY.get_sample_value(name, labels)
        return value or 0.0

    now = datetime.now(UTC)
    job = ClaimedJob(uuid.uuid4(), 1, 3, "t", now, now, 30, {"kind": "NOOP"}, "{}", now)
    before = (
        count("vakit_job_start_lateness_seconds_count", shard="7", target_kind="NOOP"),
        count("vakit_target_call_duration_seconds_count", target_kind="NOOP", result="ok"),
        count("vakit_target_fires_total", target="other", result="ok"),
        count("vakit_job_start_lateness_seconds_bucket", shard="7", target_kind="NOOP", le="0.005"),
    )
    firings = FiringMetrics(lambda: False)
    for i in range(1000):
        firings.note_start(7, "NOOP", -0.5 if i % 2 else 0.25)  # early counts as 0
        firings.note_fired(job, FireResult.success(), 0.001)
    firings.flush()
    after = (
        count("vakit_job_start_lateness_seconds_count", shard="7", target_kind="NOOP"),
        count("vakit_target_call_duration_seconds_count", target_kind="NOOP", result="ok"),
        count("vakit_target_fires_total", target="other", result="ok"),
        count("vakit_job_start_lateness_seconds_bucket", shard="7", target_kind="NOOP", le="0.005"),
    )
    assert [a - b for a, b in zip(after, before, strict=True)] == [1000, 1000, 1000, 500]
