"""Retry delays: exponential with full jitter, as pure functions.

``backoff(attempt)`` is the delay before the next try after ``attempt``
failed. The first retry comes within ``base`` seconds (30 s at most by
default), each later one may wait up to twice as long, capped at ``cap``.
Full jitter (a uniform draw up to the exponential bound) keeps a wave of
failures from coming back as a wave.
"""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["backoff", "backoff_bound"]


def backoff_bound(attempt: int, *, base: float = 5.0, cap: float = 3600.0) -> float:
    """The largest delay after failed attempt ``attempt`` (1-based)."""
    if attempt < 1:
        raise ValueError(f"attempt is 1-based, got {attempt}")
    # Exponent capped before it overflows a float for absurd attempt counts.
    return float(min(cap, base * 2 ** min(attempt - 1, 62)))


def backoff(
    attempt: int,
    *,
    base: float = 5.0,
    cap: float = 3600.0,
    rand: Callable[[], float] = random.random,
) -> float:
    """A delay in ``[bound/2, bound]``: jittered, but never an immediate retry."""
    bound = backoff_bound(attempt, base=base, cap=cap)
    return bound / 2 + rand() * bound / 2
