"""The storage seam: the role contracts (:mod:`.contracts`; their union in
:mod:`.base`), the PostgreSQL and in-memory implementations cut the same
way (:mod:`.postgres`, :mod:`.postgres_cron`, :mod:`.memory`,
:mod:`.memory_cron`), migrations and the named SQL (:mod:`.sql`).

The names below are its public face for a program outside ``cluster``
(the benchmarks): the PostgreSQL stores, to be used through their contracts
(:class:`Store`, :class:`CronStore`), the migration of a shard, and the
loader of a named-SQL file (``-- name: <name>`` blocks), for SQL of one's
own in the same format. Everything else in the package is internal.
"""

from __future__ import annotations

from cluster.store.base import CronStore, Store
from cluster.store.migrate import migrate_shard
from cluster.store.postgres import PgStore
from cluster.store.postgres_cron import PgCronStore
from cluster.store.sql import load_queries

__all__ = ["CronStore", "PgCronStore", "PgStore", "Store", "load_queries", "migrate_shard"]
