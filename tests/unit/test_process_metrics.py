"""The process metrics on-call reads: build info, event-loop lag, target call duration."""

from __future__ import annotations

import asyncio
import platform
import time

from prometheus_client import REGISTRY

import cluster
from cluster.clock import FakeClock
from cluster.looplag import watch_event_loop
from cluster.store.memory import MemStore
from cluster.targets import FireResult
from tests.unit.test_state_machine import FakeTarget, add_job, make_worker, settle
from tests.unit.test_state_machine import clock as clock
from tests.unit.test_state_machine import store as store


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_build_info_names_this_version() -> None:
    assert sample("vakit_build_info", version=cluster.__version__, python=platform.python_version()) == 1


async def test_a_blocked_loop_shows_as_lag() -> None:
    count, total = sample("vakit_event_loop_lag_seconds_count"), sample("vakit_event_loop_lag_seconds_sum")
    watcher = asyncio.create_task(watch_event_loop(interval=0.05))
    await asyncio.sleep(0)  # the watcher starts its first sleep
    asyncio.get_running_loop().call_soon(time.sleep, 0.3)  # a callback that never yields
    await asyncio.sleep(0.12)
    watcher.cancel()
    assert sample("vakit_event_loop_lag_seconds_count") > count
    # The timer due 50 ms after the watcher started ran after the 300 ms block.
    assert sample("vakit_event_loop_lag_seconds_sum") - total >= 0.25


async def test_each_firing_observes_its_call_duration(store: MemStore, clock: FakeClock) -> None:
    async def slow_then_fail(job: object) -> FireResult:
        await asyncio.sleep(0.05)
        return FireResult.retry("503")

    labels = {"target_kind": "HTTP", "result": "retry"}
    before = sample("vakit_target_call_duration_seconds_count", **labels)
    before_sum = sample("vakit_target_call_duration_seconds_sum", **labels)
    await add_job(store)
    worker = make_worker(store, clock, FakeTarget(slow_then_fail))
    assert await worker.run_once(0) == 1
    await settle(worker)
    await asyncio.sleep(0)  # the metrics flush runs on the next loop pass
    assert sample("vakit_target_call_duration_seconds_count", **labels) == before + 1
    assert sample("vakit_target_call_duration_seconds_sum", **labels) - before_sum >= 0.05
