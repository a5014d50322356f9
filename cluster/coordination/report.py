"""The cluster at a glance: members, shard owners and leaders, backlog.

Served as ``GET /api/v1/cluster`` and printed by ``vakit status``. With
ZooKeeper, members, owners and leaders come from it; without, members and
owners are the workers that beat into each shard lately, and every worker
leads (the static coordinator).
"""

from __future__ import annotations

import asyncio
from typing import Any

from cluster.config import Settings
from cluster.errors import VakitError
from cluster.store.postgres import PgStore

__all__ = ["cluster_status"]



async def cluster_status(
    settings: Settings,
    store: PgStore | None = None,
    view: Any | None = None,
    *,
    may_connect: bool = True,
) -> dict[str, Any]:
    """``view``: a started ZkClusterView, or None to connect one here when
    ``may_connect`` (the CLI); the API passes its own, or None while it is
    still connecting, and the report then says coordination is unavailable."""
    own_store = store is None
    if store is None:
        store = PgStore(settings.shards, min_size=0, max_size=2, timeout=settings.connect_timeout)
        await store.open()
    own_view = False
    unreachable = False
    if view is None and settings.zk:
        from cluster.coordination.view import ZkClusterView

        if may_connect:
            candidate = ZkClusterView(settings.zk, timeout=5.0)
            try:
                await asyncio.to_thread(candidate.start)
                view, own_view = candidate, True
            except VakitError:
                unreachable = True
        else:
            unreachable = True
    try:
        shards: list[dict[str, Any]] = []
        members: list[dict[str, Any]] = []
        coordination = "zookeeper" if view is not None else "static"
        if unreachable:
            coordination = "unavailable"
        zk_shards: dict[int, Any] = {}
        if view is not None:
            try:
                members = [
                    {"id": m.id, "host": m.host, "pid": m.pid, "version": m.version, "startedAt": m.started_at}
                    for m in await asyncio.to_thread(view.members)
                ]
                zk_shards = {s.shard: s for s in await asyncio.to_thread(view.shards, store.shard_count)}
            except VakitError:
                # ZooKeeper is away: owners and leaders are unknown, but the
                # backlog (what the on-call needs most) still comes from the shards.
                coordination = "unavailable"
        seen_all: set[str] = set()
        for shard in range(store.shard_count):
            entry: dict[str, Any] = {"shard": shard, "owners": [], "leader": None}
            try:
                stats = await store.backlog(shard)
                entry.update(backlog=stats.due, oldestDueAgeSeconds=stats.oldest_due_age_seconds)
                seen = await store.workers_seen(shard)
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
    finally:
        if own_view and view is not None:
            await asyncio.to_thread(view.stop)
        if own_store:
            await store.close()
