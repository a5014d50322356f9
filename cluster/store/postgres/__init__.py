"""The job store on PostgreSQL: the :class:`~cluster.store.base.Store`
contract as named queries, on the shards' pools (:mod:`..pgshards`).

One module per role contract, each a mixin over :class:`PgShards` (so all
share the pools, the error translation and the statement metrics):
:mod:`.creates` and :mod:`.intake` (the API's intake), :mod:`.claims` (the
worker), :mod:`.upkeep` (the leader loops), :mod:`.insight` (operators);
:mod:`.rows` is the job's row. Every public method is wrapped by
:func:`~cluster.store.pgshards.wrap_exceptions`: no driver exception leaves
this package.
"""

from __future__ import annotations

from cluster.store.postgres.claims import PgClaims
from cluster.store.postgres.insight import PgInsight, search_statements
from cluster.store.postgres.intake import PgIntake
from cluster.store.postgres.limits import PgLimits
from cluster.store.postgres.upkeep import BACKLOG_CAP

__all__ = ["BACKLOG_CAP", "PgStore", "search_statements"]


class PgStore(PgIntake, PgClaims, PgLimits, PgInsight):
    """The :class:`~cluster.store.base.Store` contract on PostgreSQL shards:
    every role's mixin over the same pools (the insight mixin brings the
    upkeep's)."""
