"""LeaderLoop: runs a task on the shards this worker leads (or owns), and
says once when it stops running one."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from cluster.errors import ShardUnavailable
from cluster.leader.loop import LeaderLoop


class Leadership:
    """A coordinator whose led and owned shards the test sets."""

    member_id = "w1"

    def __init__(self) -> None:
        self.led: set[int] = set()
        self.owned: set[int] = set()

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def owned_shards(self) -> frozenset[int]:
        return frozenset(self.owned)

    def is_leader(self, shard: int) -> bool:
        return shard in self.led

    def add_listener(self, callback: Callable[[], None]) -> None: ...


class Task:
    name = "task"

    def __init__(self) -> None:
        self.ran: list[int] = []

    async def run_once(self, shard: int) -> int:
        self.ran.append(shard)
        return 1


async def test_runs_led_shards_and_reports_each_lost_one_once() -> None:
    coord, task = Leadership(), Task()
    lost: list[int] = []
    loop = LeaderLoop(task, coord, 3, 1.0, on_lost=lost.append)
    coord.led = {0, 2}
    assert await loop.run_once() == 2
    assert task.ran == [0, 2] and lost == []
    coord.led = {0}  # shard 2 goes to another worker
    await loop.run_once()
    await loop.run_once()
    assert task.ran == [0, 2, 0, 0] and lost == [2]
    coord.led = {0, 2}  # and comes back
    await loop.run_once()
    coord.led = set()
    await loop.run_once()
    assert lost == [2, 0, 2]


async def test_owners_too_follows_ownership() -> None:
    coord, task = Leadership(), Task()
    lost: list[int] = []
    loop = LeaderLoop(task, coord, 2, 1.0, owners_too=True, on_lost=lost.append)
    coord.owned = {1}
    await loop.run_once()
    coord.owned = set()
    await loop.run_once()
    assert task.ran == [1] and lost == [1]


# -- wake-ups -------------------------------------------------------------------


class Wakes:
    """A wake-up source the test drives: per shard, who listens and when."""

    def __init__(self, fail_first: int = 0) -> None:
        self.queues: dict[int, asyncio.Queue[None]] = {}
        self.opened: list[int] = []
        self.closed: list[int] = []
        self.fail_first = fail_first

    def send(self, shard: int) -> None:
        self.queues[shard].put_nowait(None)

    async def __call__(self, shard: int) -> AsyncGenerator[None, None]:
        self.opened.append(shard)
        if self.fail_first > 0:
            self.fail_first -= 1
            raise ShardUnavailable(f"shard {shard} is unavailable", shard=shard)
        self.queues[shard] = asyncio.Queue()
        try:
            yield  # listening began
            while True:
                await self.queues[shard].get()
                yield
        finally:
            self.closed.append(shard)


class SlowTask(Task):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    async def run_once(self, shard: int) -> int:
        self.ran.append(shard)
        await asyncio.sleep(self.seconds)
        return 1


async def until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(loop: LeaderLoop) -> AsyncIterator[asyncio.Event]:
    stopping = asyncio.Event()
    task = asyncio.create_task(loop.run(stopping))
    try:
        yield stopping
    finally:
        stopping.set()
        await asyncio.wait_for(task, 5)


async def test_wake_ups_bring_passes_forward_and_those_during_a_pass_make_one_more() -> None:
    coord, task, wakes = Leadership(), SlowTask(0.3), Wakes()
    coord.led = {0}
    loop = LeaderLoop(task, coord, 1, 3600.0, wakes=wakes, wake_gap=0.05, relisten_seconds=0.05)
    async with running(loop):
        # The first pass, and the one that listening's start calls for.
        await until(lambda: len(task.ran) == 2)
        await asyncio.sleep(0.5)
        assert len(task.ran) == 2  # no wake-up, no pass: the interval is an hour
        wakes.send(0)
        await until(lambda: len(task.ran) == 3)
        for _ in range(5):  # during that pass
            wakes.send(0)
        await until(lambda: len(task.ran) == 4)
        await asyncio.sleep(0.8)
        assert len(task.ran) == 4
    assert wakes.closed == [0]  # stopping closed the listener


async def test_listens_on_the_shards_it_leads_as_leadership_moves() -> None:
    coord, task, wakes = Leadership(), Task(), Wakes()
    coord.led = {1}
    loop = LeaderLoop(task, coord, 3, 3600.0, wakes=wakes, wake_gap=0.05, relisten_seconds=0.05)
    async with running(loop):
        await until(lambda: wakes.opened == [1])
        coord.led = {1, 2}
        await until(lambda: sorted(wakes.opened) == [1, 2])
        coord.led = {2}
        await until(lambda: wakes.closed == [1])
        passes = len(task.ran)
        wakes.send(2)
        await until(lambda: len(task.ran) > passes)
        assert task.ran[-1] == 2


async def test_a_listener_that_fails_listens_again_and_the_interval_holds_meanwhile() -> None:
    coord, task, wakes = Leadership(), Task(), Wakes(fail_first=3)
    coord.led = {0}
    loop = LeaderLoop(task, coord, 1, 0.2, wakes=wakes, wake_gap=0.05, relisten_seconds=0.3)
    async with running(loop):
        await until(lambda: len(wakes.opened) == 4)  # three failures, then listening
        assert len(task.ran) >= 4  # passes every 0.2 s while no one listened
        loop.interval = 3600.0
        await asyncio.sleep(0.3)
        passes = len(task.ran)
        wakes.send(0)
        await until(lambda: len(task.ran) > passes)
