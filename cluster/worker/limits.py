"""Per-target limits: a concurrency cap and a token-bucket rate per target.

The scheduler is a back-pressure point that protects its own customers: at the
round hour a thousand jobs for one host must not arrive in the same second.
A job over the limit waits here with its lease kept (heartbeats go on); it is
never dropped. The number waiting is a metric.

Limits are set by the operator as ``host=concurrency[/rate]`` (rate in firings
per second), e.g. ``VAKIT_TARGET_LIMITS="billing.internal=50/200,kafka:orders=100"``.

The rate's clock is injected (a monotonic clock, seconds as a float): tests
move a fake one instead of sleeping through a rate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from cluster import metrics
from cluster.targets.kinds import KINDS

__all__ = ["Limit", "TargetLimiter", "TokenBucket", "parse_limits", "target_key"]


@dataclass
class TokenBucket:
    """Pure token-bucket state; ``take`` returns how long to wait (0: go now)."""

    rate: float
    burst: float
    tokens: float = field(init=False)
    stamp: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.tokens = self.burst

    def take(self, now: float) -> float:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        # Reserve the next token: waiters are served in order, never twice.
        wait = (1 - self.tokens) / self.rate
        self.tokens -= 1
        return wait


@dataclass(frozen=True)
class Limit:
    concurrency: int | None
    rate: float | None


def parse_limits(spec: dict[str, str]) -> dict[str, Limit]:
    limits = {}
    for key, value in spec.items():
        conc, _, rate = value.partition("/")
        try:
            limits[key.lower()] = Limit(
                concurrency=int(conc) if conc else None, rate=float(rate) if rate else None
            )
        except ValueError as exc:
            raise ValueError(f"target limit {key}={value!r}: expected concurrency[/rate]") from exc
    return limits


def target_key(target: Mapping[str, object]) -> str:
    """What a limit applies to: the HTTP host, ``kafka:<topic>``, as the
    target's kind says (cluster.targets.kinds)."""
    return KINDS.limit_key(target)


class TargetLimiter:
    """Concurrency caps and rates per target key; ``monotonic`` is the rate's
    clock (``time.monotonic`` unless a test injects its own)."""

    def __init__(
        self, limits: dict[str, Limit], monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._limits = limits
        self._monotonic = monotonic
        self.limits = bool(limits)  # False: the worker skips the limiter entirely
        # Limits are set at start-up: each key's semaphore, bucket and gauge
        # child are made once, not per firing.
        self._sems = {
            k: asyncio.Semaphore(v.concurrency) for k, v in limits.items() if v.concurrency
        }
        now = monotonic()
        self._buckets = {
            k: TokenBucket(v.rate, burst=max(1.0, v.rate), stamp=now)
            for k, v in limits.items()
            if v.rate
        }
        self._waiting = {k: metrics.TARGET_WAITING.labels(k) for k in limits}

    @asynccontextmanager
    async def slot(self, key: str) -> AsyncIterator[None]:
        waiting = self._waiting.get(key)
        if waiting is None:
            yield
            return
        waiting.inc()
        sem = self._sems.get(key)
        acquired = False
        try:
            if sem is not None:
                await sem.acquire()
                acquired = True
            bucket = self._buckets.get(key)
            if bucket is not None:
                wait = bucket.take(self._monotonic())
                if wait > 0:
                    await asyncio.sleep(wait)
        except BaseException:
            if acquired and sem is not None:
                sem.release()
            raise
        finally:
            waiting.dec()
        try:
            yield
        finally:
            if sem is not None:
                sem.release()
