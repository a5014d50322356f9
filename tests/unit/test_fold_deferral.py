"""The materializer's silent-cron export (and the history fold it runs
first) waits while its shard drains a backlog, for a bounded time."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from cluster.clock import FakeClock
from cluster.leader.materializer import Materializer
from cluster.model import LastSuccessParams
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore

T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)


class CountingCrons(MemCronStore):
    def __init__(self, store: MemStore) -> None:
        super().__init__(store)
        self.folds = 0

    async def last_successes(self, shard: int, params: LastSuccessParams) -> list[tuple[uuid.UUID, datetime]]:
        self.folds += 1
        return await super().last_successes(shard, params)


def materializer(
    backlog: dict[int, int], max_fold_deferral_seconds: float = 300.0
) -> tuple[Materializer, CountingCrons]:
    clock = FakeClock(T0)
    crons = CountingCrons(MemStore(1, clock))

    async def due(shard: int) -> int:
        return backlog[shard]

    m = Materializer(
        crons, clock=clock, max_clock_skew_seconds=None, last_success_interval_seconds=0,
        backlog=due, max_fold_deferral_seconds=max_fold_deferral_seconds,
    )  # fmt: skip
    return m, crons


async def test_a_drained_backlog_lets_the_fold_run() -> None:
    for reading in (0, 10_000):
        m, crons = materializer({0: reading})
        await m.run_once(0)
        assert crons.folds == 1, reading


async def test_the_fold_waits_while_the_backlog_drains_and_runs_after() -> None:
    backlog = {0: 250_000}
    m, crons = materializer(backlog)
    for _ in range(3):
        await m.run_once(0)
    assert crons.folds == 0
    backlog[0] = 40
    await m.run_once(0)
    assert crons.folds == 1


async def test_a_shard_that_stays_behind_is_folded_after_the_longest_wait() -> None:
    m, crons = materializer({0: 250_000}, max_fold_deferral_seconds=0.0)
    await m.run_once(0)
    assert crons.folds == 1
