"""What the API asks of resharding (the operator calls behind `vakit shards`).

A protocol, so the API depends on no ZooKeeper client: the process wiring
(:mod:`cluster.processes`) hands it :class:`cluster.resharding.control.ReshardControl`.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Resharding"]


class Resharding(Protocol):
    async def start(self) -> None:
        """Follow the topology (and run the mover, in an API process)."""

    async def stop(self) -> None: ...

    async def add(self, dsn: str) -> dict[str, Any]:
        """Migrate, register and map a new shard (no slots); its status entry."""

    async def request(self, kind: str, drain: int | None = None) -> dict[str, Any]:
        """Start a rebalance (``kind="rebalance"``) or the drain of shard ``drain``;
        the move's record. :class:`cluster.errors.Conflict` if a move runs."""

    async def cancel(self) -> dict[str, Any]:
        """Ask the running move to stop (rolled back to the last whole batch)."""

    async def status(self, rows: bool = True) -> dict[str, Any]:
        """The map, the move under way and (``rows``) each shard's rows."""
