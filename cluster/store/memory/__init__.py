"""An in-memory store with the PostgreSQL store's semantics, for unit tests
and the fast tier of API tests.

It follows the same state machine and fencing rules as the named queries in
``cluster/store/sql/``; time comes from an injected clock instead of the
database's ``now()`` (a params object's ``now`` pins it, as it does the
SQL). ``tests/contract`` runs one suite against this store and PostgreSQL,
so the two cannot drift. Not for production: nothing is durable.

One module per role contract, each a mixin over :class:`.shards.MemShards`,
as :mod:`cluster.store.postgres` is cut.
"""

from __future__ import annotations

from cluster.store.memory.insight import MemInsight
from cluster.store.memory.intake import MemIntake
from cluster.store.memory.limits import MemLimits

__all__ = ["MemStore"]


class MemStore(MemIntake, MemLimits, MemInsight):
    """The :class:`~cluster.store.base.Store` contract in memory."""
