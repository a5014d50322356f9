"""The leader loops' contract: the passes a shard's leader runs (reaper,
far-to-near mover, history janitor, backlog gauge) (STYLE.md item 17)."""

from __future__ import annotations

from typing import Protocol

from cluster.model import (
    MaintainHistoryParams,
    MaintenanceResult,
    MoveFarParams,
    ReapParams,
    ReapResult,
)
from cluster.store.contracts.readings import Backlog

__all__ = ["JobUpkeep"]


class JobUpkeep(Backlog, Protocol):
    """Every pass is harmless when two leaders run it at once: leadership
    only saves work (DESIGN.md, invariant 7)."""

    async def reap_expired(self, shard: int, params: ReapParams) -> ReapResult:
        """RUNNING jobs whose lease ran out: back to SCHEDULED with attempts
        left, to FAILED without; each attempt logged as LEASE_EXPIRED."""
        ...

    async def move_far_jobs(self, shard: int, params: MoveFarParams) -> int:
        """Far jobs due within the horizon move to the hot table; returns how many."""
        ...

    async def maintain_history(
        self, shard: int, params: MaintainHistoryParams
    ) -> MaintenanceResult:
        """Day partitions ahead, history past the retention dropped, keys of
        jobs no longer pending purged (the janitor). Passes on one shard may
        be called at once (two leaders overlap); each must succeed."""
        ...
