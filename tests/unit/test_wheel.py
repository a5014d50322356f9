"""The timing wheel: held jobs get their tasks before their tick, waiting at
a gate, and start at the tick, never before; a stop takes back what has not
started.

The wheel on the real event loop (its timers are the loop's), with a firing
coroutine that records when it ran; PRESTART shortened so a test takes
tenths of a second.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from cluster.worker import wheel as wheel_module
from cluster.worker.inflight import InFlight
from cluster.worker.wheel import TICK, TimingWheel


def entry(n: int) -> InFlight:
    # The wheel reads nothing of the job; the entry reads its run_at.
    job = SimpleNamespace(run_at=datetime.now(UTC))
    return InFlight(job=job, shard=0, lease_until=job.run_at, job_id=f"job_{n}")  # type: ignore[arg-type]


class Recorder:
    def __init__(self, slice_size: int = 100) -> None:
        self.ran: list[tuple[str, float]] = []
        self.all_started_calls = 0
        self.stopping = asyncio.Event()
        self.wheel = TimingWheel(self.run, self.stopping, self.on_all_started, slice_size)

    async def run(self, e: InFlight) -> None:
        self.ran.append((e.job_id, asyncio.get_running_loop().time()))

    def on_all_started(self) -> None:
        self.all_started_calls += 1


@pytest.fixture(autouse=True)
def short_prestart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheel_module, "PRESTART", 0.2)


async def test_tasks_are_made_before_the_tick_and_run_at_it() -> None:
    r = Recorder()
    held = [entry(i) for i in range(10)]
    due = hold_all(r, held, 0.5)
    assert all(e.task is None for e in held)  # the prestart is 0.2 s before the tick
    await asyncio.sleep(0.4)
    assert all(e.task is not None and not e.task.done() for e in held)
    assert r.ran == []  # waiting at the gate: nothing fired early
    await asyncio.wait([e.task for e in held if e.task])
    assert sorted(job for job, _ in r.ran) == sorted(e.job_id for e in held)
    assert min(at for _, at in r.ran) >= due - TICK


async def test_a_job_held_in_the_last_stretch_gets_its_task_at_once_and_still_waits() -> None:
    r = Recorder()
    loop = asyncio.get_running_loop()
    due = loop.time() + 0.1  # within PRESTART of now
    first, late = entry(1), entry(2)
    r.wheel.hold(first, due)
    assert first.task is not None
    r.wheel.hold(late, due)
    assert late.task is not None
    await asyncio.sleep(0.02)
    assert r.ran == []
    await asyncio.wait([first.task, late.task])
    assert [job for job, _ in r.ran] == ["job_1", "job_2"]
    assert min(at for _, at in r.ran) >= due - TICK


async def test_jobs_held_while_the_tasks_are_being_made_are_all_taken() -> None:
    r = Recorder(slice_size=3)
    held = [entry(i) for i in range(7)]
    due = hold_all(r, held, 0.25)
    await asyncio.sleep(0.06)  # the prestart (at +0.05 s) runs a slice a turn
    more = [entry(100 + i) for i in range(5)]
    for e in more:
        r.wheel.hold(e, due)
    await asyncio.sleep(0.3)
    assert sorted(job for job, _ in r.ran) == sorted(e.job_id for e in held + more)
    assert len(r.ran) == 12  # each once


async def test_a_large_instant_opens_a_gate_a_turn_and_says_when_all_started() -> None:
    r = Recorder(slice_size=50)
    held = [entry(i) for i in range(230)]
    hold_all(r, held, 0.3)
    await asyncio.sleep(0.2)
    assert r.wheel.all_started.is_set() and not r.wheel.starting
    await asyncio.wait_for(_until(lambda: len(r.ran) == 230), 2)
    await r.wheel.all_started.wait()
    assert r.all_started_calls == 1
    assert [job for job, _ in r.ran] == [e.job_id for e in held]  # in the order held


async def test_a_stop_takes_back_the_tasks_waiting_at_their_gates() -> None:
    r = Recorder()
    held = [entry(i) for i in range(5)]
    hold_all(r, held, 0.3)
    await asyncio.sleep(0.15)
    tasks = [e.task for e in held]
    assert all(t is not None for t in tasks)
    r.stopping.set()
    r.wheel.clear()
    assert all(e.task is None for e in held)  # the worker releases them as never fired
    await asyncio.sleep(0.3)
    assert r.ran == [] and all(t is not None and t.cancelled() for t in tasks)


async def test_a_job_lost_before_its_tick_gets_no_task() -> None:
    r = Recorder()
    lost, kept = entry(1), entry(2)
    lost.lost = True
    hold_all(r, [lost, kept], 0.25)
    await asyncio.sleep(0.4)
    assert lost.task is None and [job for job, _ in r.ran] == ["job_2"]


def hold_all(r: Recorder, entries: list[InFlight], in_seconds: float) -> float:
    """Hold ``entries`` for one tick ``in_seconds`` from now; the due time."""
    due = asyncio.get_running_loop().time() + in_seconds
    for e in entries:
        r.wheel.hold(e, due)
    return due


async def _until(predicate: Any) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("not within 5 s")


async def test_a_stop_while_an_instant_opens_takes_back_the_gates_still_shut() -> None:
    r = Recorder(slice_size=10)
    loop = asyncio.get_running_loop()
    held = [entry(i) for i in range(35)]
    stopped_after: list[int] = []

    async def run(e: InFlight) -> None:
        r.ran.append((e.job_id, loop.time()))
        if len(r.ran) == 10 and not stopped_after:  # the first gate's slice ran: stop
            stopped_after.append(len(r.ran))
            r.stopping.set()
            r.wheel.clear()

    r.wheel._run = run
    hold_all(r, held, 0.25)  # one instant of four slices
    await asyncio.sleep(0.5)
    ran = {job for job, _ in r.ran}
    assert 10 <= len(ran) < 35  # the gates after the stop stayed shut
    taken_back = [e for e in held if e.job_id not in ran]
    assert taken_back and all(e.task is None for e in taken_back)
    assert r.wheel.all_started.is_set() and not r.wheel.starting


async def test_no_cyclic_collection_runs_while_a_large_instant_starts() -> None:
    import gc

    r = Recorder(slice_size=50)
    collector_on: list[bool] = []

    async def run(e: InFlight) -> None:
        collector_on.append(gc.isenabled())

    r.wheel._run = run
    assert gc.isenabled()
    hold_all(r, [entry(i) for i in range(230)], 0.25)  # five slices
    await asyncio.wait_for(_until(lambda: len(collector_on) == 230), 2)
    assert not any(collector_on)  # every start ran with the collector off
    await asyncio.sleep(0.01)
    assert gc.isenabled()  # and it is back once the instant has started
    # A small instant (one slice) leaves the collector alone.
    collector_on.clear()
    hold_all(r, [entry(1000 + i) for i in range(20)], 0.25)
    await asyncio.wait_for(_until(lambda: len(collector_on) == 20), 2)
    assert all(collector_on)


async def test_a_stop_in_the_middle_of_an_instant_gives_the_collector_back() -> None:
    import gc

    r = Recorder(slice_size=10)

    async def run(e: InFlight) -> None:
        r.ran.append((e.job_id, 0.0))
        if len(r.ran) == 10:
            assert not gc.isenabled()
            r.stopping.set()
            r.wheel.clear()
            assert gc.isenabled()

    r.wheel._run = run
    hold_all(r, [entry(i) for i in range(35)], 0.25)
    await asyncio.sleep(0.5)
    assert len(r.ran) >= 10 and gc.isenabled()
