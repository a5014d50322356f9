"""Per-target limits: the concurrency cap holds and the waiting is counted."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import REGISTRY

from cluster.worker.limits import Limit, TargetLimiter


def waiting(key: str) -> float:
    return REGISTRY.get_sample_value("vakit_target_waiting_jobs", {"target": key}) or 0.0


async def test_concurrency_cap_is_never_exceeded() -> None:
    limiter = TargetLimiter({"hooks.example.com": Limit(concurrency=3, rate=None)})
    running = peak = 0
    seen_waiting = 0.0

    async def job() -> None:
        nonlocal running, peak, seen_waiting
        async with limiter.slot("hooks.example.com"):
            running += 1
            peak = max(peak, running)
            seen_waiting = max(seen_waiting, waiting("hooks.example.com"))
            await asyncio.sleep(0.01)
            running -= 1

    await asyncio.gather(*(job() for _ in range(30)))
    assert peak == 3
    assert seen_waiting > 0  # jobs over the cap waited, visibly
    assert waiting("hooks.example.com") == 0


async def test_rate_limit_spaces_firings() -> None:
    limiter = TargetLimiter({"kafka:orders": Limit(concurrency=None, rate=50.0)})
    stamps: list[float] = []

    async def job() -> None:
        async with limiter.slot("kafka:orders"):
            stamps.append(time.monotonic())

    await asyncio.gather(*(job() for _ in range(60)))
    # A burst of 50, then the rest at 50/s: the 60th cannot come before ~0.2 s.
    assert stamps[-1] - stamps[0] >= 0.15


async def test_unlimited_targets_pass_through() -> None:
    limiter = TargetLimiter({})
    assert limiter.limits is False  # the worker skips the limiter altogether
    entered = 0

    async def job() -> None:
        nonlocal entered
        async with limiter.slot("anything"):
            entered += 1
            await asyncio.sleep(0.01)

    # No cap: 100 jobs are inside at once, none waits.
    async with asyncio.timeout(1):
        await asyncio.gather(*(job() for _ in range(100)))
    assert entered == 100 and waiting("anything") == 0


async def test_cancelled_waiter_releases_nothing_it_did_not_take() -> None:
    limiter = TargetLimiter({"h": Limit(concurrency=1, rate=None)})
    gate = asyncio.Event()

    async def holder() -> None:
        async with limiter.slot("h"):
            await gate.wait()

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    second = asyncio.create_task(holder())
    await asyncio.sleep(0.01)
    second.cancel()
    gate.set()
    await first
    await asyncio.gather(second, return_exceptions=True)
    # The slot is free again exactly once: a new job gets it at once, and
    # while it holds it a second one waits (the cap is still 1, not 2).
    async with asyncio.timeout(1):
        async with limiter.slot("h"):
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    async with limiter.slot("h"):
                        pass


async def test_the_rate_reads_the_injected_clock() -> None:
    # A fake monotonic clock: the bucket refills when it moves, not when
    # wall time passes.
    now = 100.0
    limiter = TargetLimiter({"kafka:clocked": Limit(concurrency=None, rate=2.0)}, monotonic=lambda: now)
    entered: list[int] = []

    async def job(i: int) -> None:
        async with limiter.slot("kafka:clocked"):
            entered.append(i)

    await job(1)
    await job(2)  # the burst: two tokens
    third = asyncio.create_task(job(3))
    for _ in range(10):
        await asyncio.sleep(0)
    # No token left and the clock has not moved: the third waits, visibly.
    assert entered == [1, 2] and not third.done()
    assert waiting("kafka:clocked") == 1
    third.cancel()
    await asyncio.gather(third, return_exceptions=True)
    # 1.5 s later by the injected clock the bucket holds two tokens again
    # (the cancelled waiter had reserved one): both go at once.
    now += 1.5
    fourth, fifth = asyncio.create_task(job(4)), asyncio.create_task(job(5))
    for _ in range(10):
        await asyncio.sleep(0)
    assert fourth.done() and fifth.done()
    assert entered == [1, 2, 4, 5] and waiting("kafka:clocked") == 0
