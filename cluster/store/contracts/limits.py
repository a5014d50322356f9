"""Limits that hold across the cluster (issue 44): the run-time settings
(the operator's, through the API) and the limited claims (the worker's)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from cluster.model import AdmittedJob, LimitedClaimParams, LimitSetting, SetLimitParams
from cluster.store.contracts.sharded import Sharded

__all__ = ["LimitSettings", "LimitedClaims"]


class LimitSettings(Sharded, Protocol):
    """The run-time limits every shard holds (over VAKIT_TARGET_LIMITS)."""

    async def read_limits(self, shard: int) -> list[LimitSetting]:
        """The run-time limits ``shard`` holds, by key."""
        ...

    async def set_limit(self, shard: int, params: SetLimitParams) -> None:
        """Set the run-time limit on a key on ``shard``, or drop it."""
        ...


class LimitedClaims(LimitSettings, Protocol):
    """What a worker does for limited keys."""

    async def claim_limited(self, shard: int, params: LimitedClaimParams) -> list[AdmittedJob]:
        """Claim the key's jobs due now on ``shard``, as many as the shard's
        share of the limit has room for (cluster.model.limits.admit), each
        with its start time; the others stay SCHEDULED."""
        ...

    async def count_waiting(self, shard: int, keys: list[str]) -> dict[str, int]:
        """Due jobs of each of ``keys`` not claimed on ``shard`` (held back)."""
        ...

    async def slow_limit(self, shard: int, key: str, until: datetime) -> None:
        """Back-pressure: no firing of ``key`` on ``shard`` starts before ``until``."""
        ...
