"""Adding a shard to a running cluster: `vakit shards add DSN`.

The new database is migrated, given its place in the layout, fenced on every
slot (it serves nothing until the mover flips slots to it), appended to the
shard list in ZooKeeper and to the slot map (the next epoch, one more shard,
no slot), and given a copy of the cluster's calendars. Every process watching the topology opens a pool to it; only a
rebalance gives it work. Each step is idempotent: running the command again
after a crash finishes what the last run began.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from cluster.coordination.topology import ZkTopology
from cluster.errors import Conflict, InvalidRequest
from cluster.store.calendar_copy import copy_calendars
from cluster.store.dsn import mask_dsn
from cluster.store.layout import LayoutError, grow_layout
from cluster.store.migrate import migrate_shard
from cluster.store.sql import QUERIES

__all__ = ["add_shard"]

log = logging.getLogger(__name__)


def _fence_everything(dsn: str, timeout: float) -> None:
    with psycopg.connect(dsn, connect_timeout=max(1, int(timeout)), autocommit=True) as conn:
        conn.execute(QUERIES["fence_all_slots"])


def add_shard_blocking(topology: ZkTopology, dsn: str, timeout: float = 10.0) -> int:
    """Register ``dsn`` as the next shard; its number. Blocking."""
    dsns = topology.shard_dsns()
    if dsn in dsns:
        shard = dsns.index(dsn)
        log.info("shard %s (%s) is registered already; finishing its steps", shard, mask_dsn(dsn))
        dsns = dsns[:shard]
    shard = len(dsns)
    migrate_shard(dsn, shard)
    current = topology.read_map()
    if current.shard_count <= shard:
        # Not yet in the map, so no slot can be flipped to it: fencing them
        # all cannot take one away from it.
        _fence_everything(dsn, timeout)
    grow_layout(dsns, dsn, timeout)
    topology.register_shard(shard, dsn)
    current = topology.read_map()
    if current.shard_count <= shard:
        topology.replace_map(current.epoch, current.with_shard())
    # Every shard holds every calendar (issue 45); copied once the processes
    # can see the shard, so a later calendar write reaches it as well.
    calendars = copy_calendars(dsns, dsn, timeout)
    log.info("added shard %s (%s), %s calendar(s) copied", shard, mask_dsn(dsn), calendars)
    return shard


async def add_shard(topology: ZkTopology, dsn: str, timeout: float = 10.0) -> int:
    try:
        return await asyncio.to_thread(add_shard_blocking, topology, dsn, timeout)
    except LayoutError as exc:
        raise Conflict(str(exc)) from exc
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InvalidRequest(f"cannot use {mask_dsn(dsn)} as a shard: {first}") from exc
