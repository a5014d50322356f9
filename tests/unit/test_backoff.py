from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.backoff import backoff, backoff_bound


def test_first_retry_within_30_seconds_by_default() -> None:
    assert backoff_bound(1) <= 30
    assert all(backoff(1) <= 30 for _ in range(100))


def test_exponential_and_capped() -> None:
    bounds = [backoff_bound(a, base=5, cap=300) for a in range(1, 10)]
    assert bounds[:4] == [5, 10, 20, 40]
    assert bounds[-1] == 300 and max(bounds) == 300


def test_jitter_spans_upper_half() -> None:
    assert backoff(3, base=5, rand=lambda: 0.0) == 10.0
    assert backoff(3, base=5, rand=lambda: 1.0) == 20.0


@given(st.integers(1, 10_000), st.floats(0, 1))
def test_never_negative_never_over_cap(attempt: int, r: float) -> None:
    d = backoff(attempt, base=5, cap=3600, rand=lambda: r)
    assert 0 < d <= 3600


def test_attempt_is_one_based() -> None:
    with pytest.raises(ValueError):
        backoff_bound(0)
