"""Writing to the shard that holds a slot, while slots move (issue 42).

A write for a slot that is moving is refused by the shard inside its own
transaction (:class:`~cluster.errors.SlotMoving`: nothing was written). The
API then waits a moment and writes again on the shard the newest map names:
a batch's copy takes a fraction of a second, so most such writes succeed on
the new owner instead of reaching the client as a 503. Past
:data:`MOVE_WAIT_SECONDS` the 503 (``Retry-After``) goes to the client.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from cluster.errors import SlotMoving
from cluster.services.context import Services

__all__ = ["MOVE_WAIT_SECONDS", "on_owner", "owner_and"]

T = TypeVar("T")

# How long a write for a moving slot waits for it before answering 503.
MOVE_WAIT_SECONDS = 2.0
_RETRY_EVERY = 0.05


async def on_owner(ctx: Services, key: uuid.UUID, write: Callable[[int], Awaitable[T]]) -> T:
    """``write(shard)`` on the shard holding ``key``'s slot; while the slot
    moves, again on the owner the newest map names, for up to
    :data:`MOVE_WAIT_SECONDS`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + MOVE_WAIT_SECONDS
    while True:
        try:
            return await write(ctx.shards.shard_of(key))
        except SlotMoving:
            if loop.time() >= deadline:
                raise
            await asyncio.sleep(_RETRY_EVERY)


async def owner_and(
    ctx: Services, key: uuid.UUID, write: Callable[[int], Awaitable[T]]
) -> tuple[T, int]:
    """:func:`on_owner`, with the shard that took the write."""
    took: list[int] = []

    async def noted(shard: int) -> T:
        took[:] = [shard]
        return await write(shard)

    result = await on_owner(ctx, key, noted)
    return result, took[0]
