"""Apply the numbered migrations to each shard, idempotently.

Each shard records what it has in ``schema_migrations``; a transaction-level
advisory lock keeps two ``vakit migrate`` runs (or two ``vakit up``) from
applying the same migration at once.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import psycopg

from cluster.store.sql import QUERIES, load_migrations

__all__ = ["LATEST_VERSION", "migrate_shard", "schema_version"]

log = logging.getLogger(__name__)

# Any constant works; it only has to be the same for every Vakit process.
_LOCK_KEY = 0x56414B4954  # "VAKIT"

LATEST_VERSION = len(load_migrations())


def schema_version(conn: psycopg.Connection) -> int:
    row = conn.execute(QUERIES["schema_version"], {}).fetchone()
    return int(row[0]) if row else 0


def migrate_shard(dsn: str, shard: int | None = None) -> list[int]:
    """Bring one shard to the latest schema; returns the versions applied."""
    applied: list[int] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(QUERIES["migration_lock"], {"key": _LOCK_KEY})
            conn.execute(QUERIES["create_migrations_table"], {})
            current = schema_version(conn)
            for migration in load_migrations():
                if migration.version <= current:
                    continue
                log.info(
                    "applying migration",
                    extra={
                        "shard": shard,
                        "version": migration.version,
                        "migration": migration.name,
                    },
                )
                conn.execute(migration.sql.encode())
                conn.execute(
                    QUERIES["record_migration"],
                    {"version": migration.version, "name": migration.name},
                )
                applied.append(migration.version)
        # Partitions for the days around now, so the first finished jobs do
        # not all land in the default partition.
        today = datetime.now(UTC).date()
        conn.execute(
            QUERIES["ensure_partitions"],
            {"from": today - timedelta(days=1), "to": today + timedelta(days=7)},
        )
    return applied
