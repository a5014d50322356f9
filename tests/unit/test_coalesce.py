"""The coalescer: calls that arrive while batches are being written go
together in the next one, each with its own outcome."""

from __future__ import annotations

import asyncio

import pytest

from cluster.store.coalesce import Coalescer


class Recorder:
    """A ``run`` that holds each batch until released and records it."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[int]]] = []
        self.gate = asyncio.Event()

    async def run(self, shard: int, items: list[int]) -> list[int | BaseException]:
        self.batches.append((shard, items))
        await self.gate.wait()
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]


async def test_a_call_alone_goes_at_once_alone() -> None:
    rec = Recorder()
    rec.gate.set()
    c: Coalescer[int, int] = Coalescer(rec.run, in_flight=2, most=100)
    assert await c.submit(0, 4) == 40
    assert rec.batches == [(0, [4])]


async def test_calls_waiting_for_a_busy_shard_go_together_each_with_its_outcome() -> None:
    rec = Recorder()
    c: Coalescer[int, int] = Coalescer(rec.run, in_flight=2, most=100)
    calls = []
    for i in range(10):  # one arrives, and is being written; another; then eight
        calls.append(asyncio.create_task(c.submit(0, i)))
        if i < 2:
            await asyncio.sleep(0)
            await asyncio.sleep(0)
    await asyncio.sleep(0)
    # Two batches in flight, one call each: the other eight wait.
    assert rec.batches == [(0, [0]), (0, [1])]
    rec.gate.set()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert [b for _, b in rec.batches] == [[0], [1], [2, 3, 4, 5, 6, 7, 8, 9]]
    assert [o if isinstance(o, int) else str(o) for o in outcomes] == [
        0, "odd 1", 20, "odd 3", 40, "odd 5", 60, "odd 7", 80, "odd 9",
    ]  # fmt: skip


async def test_a_batch_holds_at_most_most_and_shards_do_not_wait_for_each_other() -> None:
    rec = Recorder()
    c: Coalescer[int, int] = Coalescer(rec.run, in_flight=1, most=3)
    calls = [asyncio.create_task(c.submit(i % 2, 2 * i)) for i in range(10)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    # The first call of each shard writes itself, whatever the other does;
    # the rest wait for it.
    assert sorted(rec.batches) == [(0, [0]), (1, [2])]
    rec.gate.set()
    await asyncio.gather(*calls)
    # Then a writer per shard took at most three at once.
    assert sorted(rec.batches[2:]) == [(0, [4, 8, 12]), (0, [16]), (1, [6, 10, 14]), (1, [18])]


async def test_a_call_that_writes_itself_starts_a_writer_for_those_that_waited() -> None:
    rec = Recorder()
    c: Coalescer[int, int] = Coalescer(rec.run, in_flight=1, most=100)
    first = asyncio.create_task(c.submit(0, 2))
    await asyncio.sleep(0)
    later = [asyncio.create_task(c.submit(0, i)) for i in (4, 6)]
    await asyncio.sleep(0)
    assert rec.batches == [(0, [2])]
    rec.gate.set()
    assert await first == 20
    assert await asyncio.gather(*later) == [40, 60]
    assert rec.batches == [(0, [2]), (0, [4, 6])]


async def test_a_failed_batch_fails_each_of_its_calls_and_the_next_batch_still_goes() -> None:
    seen: list[list[int]] = []

    async def run(shard: int, items: list[int]) -> list[int | BaseException]:
        seen.append(items)
        await asyncio.sleep(0)
        if 1 in items:
            raise ConnectionError("shard gone")
        return list(items)

    c: Coalescer[int, int] = Coalescer(run, in_flight=1, most=2)
    calls = [asyncio.create_task(c.submit(0, i)) for i in range(5)]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    # The first writes itself; the others go two at a time.
    assert seen == [[0], [1, 2], [3, 4]]
    assert outcomes[0] == 0
    assert all(isinstance(o, ConnectionError) for o in outcomes[1:3])
    assert outcomes[3:] == [3, 4]


async def test_a_caller_that_goes_away_leaves_the_others_their_outcomes() -> None:
    rec = Recorder()
    c: Coalescer[int, int] = Coalescer(rec.run, in_flight=1, most=100)
    first = asyncio.create_task(c.submit(0, 2))
    await asyncio.sleep(0)
    gone, kept = asyncio.create_task(c.submit(0, 4)), asyncio.create_task(c.submit(0, 6))
    await asyncio.sleep(0)
    gone.cancel()
    rec.gate.set()
    assert await first == 20 and await kept == 60
    with pytest.raises(asyncio.CancelledError):
        await gone
