"""A new shard gets the cluster's calendars (issue 45): `vakit shards add`.

Every shard keeps a copy of every calendar (cluster/services/calendars.py);
a shard added to a running cluster has none, and crons a rebalance moves to
it would wait for their calendars (the materializer plans no cron without
its calendar's copy). :func:`copy_calendars` gives it the greatest version
each existing shard holds, by the same write the API uses, so a copy never
goes back and running it twice changes nothing. A calendar written while the
new shard is being added, by a process that does not know it yet, reaches it
with the next write of that calendar or of a cron that follows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from cluster.store.sql import QUERIES

__all__ = ["copy_calendars"]


def copy_calendars(sources: Sequence[str], target: str, timeout: float = 10.0) -> int:
    """Write to ``target`` the greatest copy of each calendar ``sources`` hold;
    how many calendars. Blocking (psycopg's sync driver, as the layout's steps)."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for dsn in sources:
        with psycopg.connect(dsn, connect_timeout=max(1, int(timeout)), autocommit=True) as conn:
            with conn.cursor(row_factory=dict_row) as cur:
                for row in cur.execute(QUERIES["all_calendars"]):
                    key = (row["owner_service"], row["name"])
                    held = best.get(key)
                    order = (row["version"], row["fingerprint"])
                    if held is None or (held["version"], held["fingerprint"]) < order:
                        best[key] = row
    with psycopg.connect(target, connect_timeout=max(1, int(timeout)), autocommit=True) as conn:
        for row in best.values():
            conn.execute(
                QUERIES["put_calendar"],
                {
                    "owner": row["owner_service"],
                    "name": row["name"],
                    "version": row["version"],
                    "fingerprint": row["fingerprint"],
                    "time_zone": row["time_zone"],
                    "exclude_dates": row["exclude_dates"],
                    "include_dates": row["include_dates"],
                    "business_week": row["business_week"],
                    "description": row["description"],
                    "deleted": row["deleted"],
                    "now": row["updated_at"],
                },
            )
    return len(best)
