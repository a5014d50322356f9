"""The cluster at a glance: members, shard owners and leaders, backlog.

Served as ``GET /api/v1/cluster`` and printed by ``vakit status``. With
ZooKeeper, members, owners and leaders come from it; without, members and
owners are the workers that beat into each shard lately, and every worker
leads (the static coordinator).

It reads through the store contract and a :class:`ClusterView`; the caller
(the API, or the CLI as composition code) builds and owns both.
"""

from __future__ import annotations

import asyncio
from typing import Any

from cluster.coordination.base import ClusterView, ShardStatus
from cluster.errors import VakitError
from cluster.model import BacklogParams, WorkersSeenParams
from cluster.store.contracts.insight import JobInsight

__all__ = ["cluster_status"]


async def cluster_status(
    store: JobInsight, view: ClusterView | None, *, coordinated: bool
) -> dict[str, Any]:
    """``coordinated``: ZooKeeper is configured. ``view``: a started view of
    it, or None when it could not be reached (the report then says
    coordination is unavailable, and still gives the backlog)."""
    members: list[dict[str, Any]] = []
    coordination = "static"
    if coordinated:
        coordination = "zookeeper" if view is not None else "unavailable"
    zk_shards: dict[int, ShardStatus] = {}
    if view is not None and coordination == "zookeeper":
        try:
            members = [
                {
                    "id": m.id,
                    "host": m.host,
                    "pid": m.pid,
                    "version": m.version,
                    "startedAt": m.started_at,
                }
                for m in await asyncio.to_thread(view.members)
            ]
            zk_shards = {
                s.shard: s for s in await asyncio.to_thread(view.shards, store.shard_count)
            }
        except VakitError:
            # ZooKeeper is away: owners and leaders are unknown, but the
            # backlog (what the on-call needs most) still comes from the shards.
            coordination = "unavailable"
    shards: list[dict[str, Any]] = []
    seen_all: set[str] = set()
    for shard in range(store.shard_count):
        entry: dict[str, Any] = {"shard": shard, "owners": [], "leader": None}
        try:
            stats = await store.backlog(shard, BacklogParams())
            entry.update(backlog=stats.due, oldestDueAgeSeconds=stats.oldest_due_age_seconds)
            seen = await store.workers_seen(shard, WorkersSeenParams())
        except VakitError as exc:
            entry.update(backlog=None, oldestDueAgeSeconds=None, error=exc.message)
            seen = []
        seen_all.update(seen)
        if coordination == "zookeeper":
            zs = zk_shards.get(shard)
            entry.update(owners=list(zs.owners) if zs else [], leader=zs.leader if zs else None)
        else:
            # Without ZooKeeper's word, the owners shown are the workers
            # that polled the shard lately (they keep claiming meanwhile).
            entry.update(owners=seen, leader=None)
        shards.append(entry)
    if coordination != "zookeeper":
        members = [
            {"id": w, "host": None, "pid": None, "version": None, "startedAt": None}
            for w in sorted(seen_all)
        ]
    return {"coordination": coordination, "members": members, "shards": shards}
