"""The storage seam as a whole: the union of the role contracts.

Callers are typed against their role (:mod:`cluster.store.contracts`):
the API against intake and insight, the worker against claims, the leader
loops against upkeep. :class:`Store` and :class:`CronStore` are what one
implementation provides in full, for the process wiring and the contract
tests only.

Implementations: :class:`cluster.store.postgres.PgStore` (PostgreSQL, one
pool per shard) and :class:`cluster.store.memory.MemStore` (in memory, for
unit tests and the fast API tier); their cron counterparts in
:mod:`.postgres_cron` and :mod:`.memory_cron`. Both raise only
:mod:`cluster.errors` exceptions, and ``tests/contract`` holds them to the
same rules.
"""

from __future__ import annotations

from typing import Protocol

from cluster.model import WORKER_SEEN_SECONDS
from cluster.store.contracts.claims import JobClaims
from cluster.store.contracts.cron_intake import CronIntake
from cluster.store.contracts.cron_upkeep import CRON_SOON_SECONDS, CronUpkeep
from cluster.store.contracts.insight import JobInsight
from cluster.store.contracts.intake import JobIntake
from cluster.store.contracts.sharded import Lifecycle
from cluster.store.contracts.upkeep import JobUpkeep

# WORKER_SEEN_SECONDS is re-exported: readiness and status read the window here.
__all__ = ["CRON_SOON_SECONDS", "WORKER_SEEN_SECONDS", "CronStore", "Store"]


class Store(JobIntake, JobClaims, JobUpkeep, JobInsight, Lifecycle, Protocol):
    """Every job operation: what an implementation provides. A caller is
    typed against its role instead."""


class CronStore(CronIntake, CronUpkeep, Protocol):
    """Every cron operation. A cron's occurrences are jobs of the same
    shard: they are claimed, finished and kept in history through
    :class:`Store`."""
