"""A read-only view of the cluster as ZooKeeper records it, for the API and operators."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

from cluster.coordination.assignment import assign_shards
from cluster.coordination.base import Member, ShardStatus
from cluster.coordination.znodes import (
    CONTENDER_RE,
    close_client,
    ensure_chroot,
    leader_path,
    member_from_json,
    normalize_root,
    sequence,
)
from cluster.errors import CoordinationUnavailable

__all__ = ["ZkClusterView"]

log = logging.getLogger(__name__)


class ZkClusterView:
    """Members and shard leaders as ZooKeeper records them, for the API and operators.

    The leader reported for a shard is the member whose contender node is
    lowest: it may be in its fenced-off grace period and not running leader-only
    loops right now, which only ZooKeeper-side state cannot show.

    Every read answers within ``timeout`` or raises
    :class:`CoordinationUnavailable`: a status page must not hang while
    ZooKeeper is away (a plain kazoo call would wait for the reconnect).
    """

    def __init__(self, connect: str, root: str = "/vakit", *, timeout: float = 10.0) -> None:
        self.connect = connect
        self._root = normalize_root(root)
        self._timeout = timeout
        self._client = KazooClient(
            hosts=connect,
            timeout=timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0),
        )

    def start(self) -> None:
        try:
            ensure_chroot(self.connect, self._timeout)
            self._client.start(timeout=self._timeout)
        except (KazooTimeoutError, KazooException) as exc:
            with contextlib.suppress(Exception):
                self._client.close()
            raise CoordinationUnavailable(
                f"could not connect to ZooKeeper within {self._timeout:g} s", connect=self.connect
            ) from exc

    def stop(self) -> None:
        close_client(self._client)

    @property
    def connected(self) -> bool:
        return bool(self._client.state == KazooState.CONNECTED)

    def _read(self, call: Callable[..., Any], *args: Any) -> Any:
        """One async kazoo read, bounded by the timeout. NoNodeError passes through."""
        if self._client.state != KazooState.CONNECTED:
            raise CoordinationUnavailable("not connected to ZooKeeper", connect=self.connect)
        try:
            return call(*args).get(timeout=self._timeout)
        except NoNodeError:
            raise
        except (KazooTimeoutError, KazooException) as exc:
            raise CoordinationUnavailable("ZooKeeper did not answer", connect=self.connect) from exc

    def member_ids(self) -> list[str]:
        try:
            return sorted(self._read(self._client.get_children_async, f"{self._root}/members"))
        except NoNodeError:
            return []

    def members(self) -> list[Member]:
        """Live members, sorted by id; a record that vanishes meanwhile is skipped."""
        found: list[Member] = []
        for member_id in self.member_ids():
            try:
                data, _ = self._read(self._client.get_async, f"{self._root}/members/{member_id}")
            except NoNodeError:
                continue
            try:
                found.append(member_from_json(data))
            except (ValueError, KeyError, TypeError):
                log.warning("unreadable member record %s: %r", member_id, data[:200])
        return found

    def shards(self, shard_count: int) -> list[ShardStatus]:
        """Owners (from the live members) and the current leader of every shard."""
        assignment = assign_shards(self.member_ids(), shard_count)
        statuses: list[ShardStatus] = []
        for shard in range(shard_count):
            owners = tuple(sorted(m for m, shards in assignment.items() if shard in shards))
            statuses.append(ShardStatus(shard=shard, owners=owners, leader=self.leader(shard)))
        return statuses

    def leader(self, shard: int) -> str | None:
        """Member id held by the lowest contender node of ``shard``, if any."""
        path = leader_path(self._root, shard)
        try:
            children = self._read(self._client.get_children_async, path)
        except NoNodeError:
            return None
        for node in sorted((c for c in children if CONTENDER_RE.search(c)), key=sequence):
            try:
                data, _ = self._read(self._client.get_async, f"{path}/{node}")
            except NoNodeError:
                continue  # it just left; the next one leads
            return str(data.decode())
        return None
