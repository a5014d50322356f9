"""Shard readings more than one role takes, each a protocol of its own so
that every role contract can include it without including the other roles.

- :class:`WorkersSeen`: the worker's preload (which peers poll a shard) and
  the operator's readiness.
- :class:`Backlog`: the leader's gauge and fold deferral, and the
  operator's cluster report.
- :class:`CronPending`: the materializer's one-at-a-time policies and the
  API's pause and resume of a cron.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from cluster.model import (
    BacklogParams,
    BacklogStats,
    PendingInfo,
    PendingParams,
    WorkersSeenParams,
)
from cluster.store.contracts.sharded import Sharded

__all__ = ["Backlog", "CronPending", "WorkersSeen"]


class WorkersSeen(Sharded, Protocol):
    async def workers_seen(self, shard: int, params: WorkersSeenParams) -> list[str]:
        """Workers that beat into the shard within ``params.within_seconds``."""
        ...


class Backlog(Sharded, Protocol):
    async def backlog(self, shard: int, params: BacklogParams) -> BacklogStats:
        """SCHEDULED jobs due now (up to a cap) and the age of the oldest."""
        ...


class CronPending(Sharded, Protocol):
    async def pending(self, shard: int, params: PendingParams) -> dict[uuid.UUID, PendingInfo]:
        """Per cron: occurrences not finished (near and far), and when its
        latest occurrence finished. Every id asked for has an entry."""
        ...
