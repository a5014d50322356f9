"""What every store contract has: the shard count, and (for the process
that owns the store) opening and closing its connections."""

from __future__ import annotations

from typing import Protocol

__all__ = ["Lifecycle", "Sharded"]


class Sharded(Protocol):
    """The base of every role: the shard is always an explicit argument, so
    each caller needs to know how many there are."""

    @property
    def shard_count(self) -> int:
        """Read-only: it grows when a shard is added to the running cluster."""
        ...


class Lifecycle(Protocol):
    """Opening and closing: only the process that wires a store calls these."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...
