"""Cron definitions and occurrences in PostgreSQL, on the shards' pools.

The :class:`~cluster.store.base.CronStore` contract over PostgreSQL, one
module per role contract (:mod:`.intake` for the API, :mod:`.upkeep` for
the materializer and the janitor) over :mod:`.pools`. Kept apart from
:mod:`cluster.store.postgres` (one concept per package) but sharing its
pools and its error translation: no psycopg exception leaves this package.
"""

from __future__ import annotations

from cluster.store.postgres_cron.intake import PgCronIntake
from cluster.store.postgres_cron.upkeep import PgCronUpkeep

__all__ = ["PgCronStore"]


class PgCronStore(PgCronIntake, PgCronUpkeep):
    """:class:`~cluster.store.base.CronStore` on the pools of a :class:`PgStore`."""
