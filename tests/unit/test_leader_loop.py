"""LeaderLoop: runs a task on the shards this worker leads (or owns), and
says once when it stops running one."""

from __future__ import annotations

from collections.abc import Callable

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
