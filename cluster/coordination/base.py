"""The coordination seam: which shards a worker polls, and who leads each shard.

Ownership and leadership are efficiency hints, never correctness (DESIGN.md,
invariant 7): the database's SKIP LOCKED, attempt fencing and unique
constraints keep two owners or two leaders harmless. The worker and the
maintenance loops see coordination only through :class:`Coordinator`.

* :class:`StaticCoordinator`: no coordination service. Every worker owns and
  leads every shard; the loops are safe to run everywhere, only wasteful.
* ``cluster.zkcoord.ZkCoordinator``: ZooKeeper through kazoo.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

__all__ = ["ClusterView", "Coordinator", "Member", "ShardStatus", "StaticCoordinator"]


@dataclass(frozen=True)
class Member:
    id: str
    host: str
    pid: int
    version: str
    started_at: datetime


@dataclass(frozen=True)
class ShardStatus:
    shard: int
    owners: tuple[str, ...] = field(default_factory=tuple)
    leader: str | None = None


class Coordinator(Protocol):
    """What a worker asks of coordination. All reads are cheap snapshots and
    safe to call from any thread or coroutine; ``start``/``stop`` block."""

    member_id: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def owned_shards(self) -> frozenset[int]:
        """Shards this worker should poll now. Kept (not emptied) while the
        coordination service is unreachable: the database lease is the net."""
        ...

    def is_leader(self, shard: int) -> bool:
        """May leader-only work for ``shard`` run now? False as soon as the
        session is SUSPENDED or not confirmed recently, not only at LOST."""
        ...

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Called (from any thread) after ownership or leadership changed."""
        ...


class ClusterView(Protocol):
    """A read-only view of members, shard owners and leaders, for the API and
    operators (``/api/v1/cluster``, ``vakit status``). Calls block; each
    answers in bounded time or raises
    :class:`~cluster.errors.CoordinationUnavailable`."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def members(self) -> list[Member]: ...

    def shards(self, shard_count: int) -> list[ShardStatus]: ...


class StaticCoordinator:
    """Every worker owns and leads every shard."""

    def __init__(self, member_id: str, shard_count: int) -> None:
        self.member_id = member_id
        self._shards = frozenset(range(shard_count))

    def start(self) -> None:
        from cluster import metrics

        metrics.SHARDS_OWNED.set(len(self._shards))
        metrics.SHARDS_LED.set(len(self._shards))

    def stop(self) -> None:
        return None

    def owned_shards(self) -> frozenset[int]:
        return self._shards

    def is_leader(self, shard: int) -> bool:
        return shard in self._shards

    def add_listener(self, callback: Callable[[], None]) -> None:
        return None

    def grow(self, shard_count: int) -> None:
        self._shards = frozenset(range(shard_count))
