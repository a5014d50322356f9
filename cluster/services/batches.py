"""Many items written with one call per shard, the shards at once: what
the batch creates of jobs and of crons share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from cluster.errors import VakitError

__all__ = ["write_by_shard"]

T = TypeVar("T")
R = TypeVar("R")


async def write_by_shard(
    by_shard: dict[int, list[tuple[int, T]]],
    write: Callable[[int, list[T]], Awaitable[Sequence[R | VakitError]]],
) -> dict[int, R | Exception]:
    """``write`` each shard's items (``(index, item)`` pairs) at once; each
    index's outcome: what its slot of the write returned (a result or an
    error), or, when a shard's write raised, that exception for each of its
    items (the same object: a shard that is down is one failure). No item
    is retried elsewhere: its write may have committed."""
    outcomes: dict[int, R | Exception] = {}

    async def one(shard: int, items: list[tuple[int, T]]) -> None:
        try:
            written = await write(shard, [item for _, item in items])
        except Exception as exc:
            for index, _ in items:
                outcomes[index] = exc
            return
        for (index, _), outcome in zip(items, written, strict=True):
            outcomes[index] = outcome

    await asyncio.gather(*(one(shard, items) for shard, items in by_shard.items()))
    return outcomes
