"""The cluster's topology in ZooKeeper: the shard list, the slot map, the move under way.

Layout under ``root``::

    {root}/shardlist     JSON {"dsns": [...]}: every registered shard, in order
    {root}/slotmap       the slot map (cluster.coordination.slotmap)
    {root}/moves/current JSON: the move under way (cluster.resharding.ledger)
    {root}/moves/lock    the mover's lock (one mover in the cluster)
    {root}/retired       JSON {"shards": [...]}: drained shards, which rebalancing leaves empty

An absent shard list means the configured one (``VAKIT_SHARDS``): a cluster
that never grew needs no write. A shard added later is appended here, so a
process learns its DSN from ZooKeeper, whether it was running when the shard
was added or started later with the old ``VAKIT_SHARDS``.

Every write is a compare-and-set on the node's version, so two operators adding
a shard at once get one index each or a conflict, never one index twice.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, LockTimeout, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.recipe.lock import Lock
from kazoo.retry import KazooRetry

from cluster.coordination.slotmap import ZkSlotMap
from cluster.coordination.znodes import close_client, ensure_chroot, normalize_root
from cluster.errors import Conflict, CoordinationUnavailable
from shardmap import SlotMap

__all__ = ["Topology", "ZkTopology"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Topology:
    """The shard list and the slot map, as one process last saw them."""

    dsns: tuple[str, ...]
    slots: SlotMap


class ZkTopology:
    """The topology of one cluster, read, watched and written in ZooKeeper.

    Owns its kazoo client (one session a process); calls block, so the
    asyncio callers run them in a thread.
    """

    def __init__(
        self,
        connect: str,
        configured: Sequence[str],
        *,
        root: str = "/vakit",
        timeout: float = 10.0,
        client: KazooClient | None = None,
    ) -> None:
        self.connect = connect
        self.configured = tuple(configured)
        self._root = normalize_root(root)
        self._timeout = timeout
        self._own_client = client is None
        self._client = client or KazooClient(
            hosts=connect,
            timeout=timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0),
            command_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0),
        )
        self._retry = KazooRetry(max_tries=5, delay=0.1, max_delay=2.0)
        self.slotmap = ZkSlotMap(self._client, self._root, len(self.configured), self._retry)
        self.list_path = f"{self._root}/shardlist"
        self.move_path = f"{self._root}/moves/current"
        self.lock_path = f"{self._root}/moves/lock"
        self.retired_path = f"{self._root}/retired"
        self._lock = threading.Lock()
        self._dsns: tuple[str, ...] | None = None

    @property
    def client(self) -> KazooClient:
        return self._client

    def start(self) -> None:
        if not self._own_client:
            return
        try:
            ensure_chroot(self.connect, self._timeout)
            self._client.start(timeout=self._timeout)
        except (KazooTimeoutError, Exception) as exc:
            raise CoordinationUnavailable(
                f"could not connect to ZooKeeper within {self._timeout:g} s", connect=self.connect
            ) from exc

    def stop(self) -> None:
        if self._own_client:
            close_client(self._client)

    # -- the shard list ------------------------------------------------------

    def shard_dsns(self) -> tuple[str, ...]:
        """Every registered shard's DSN: the configured ones, then those added."""
        dsns, _ = self._read_list()
        return dsns

    def register_shard(self, expected_count: int, dsn: str) -> int:
        """Append ``dsn`` as shard ``expected_count``; :class:`Conflict` if the
        list has another length (another shard was added meanwhile). A retry
        that finds ``dsn`` already at that index succeeds."""

        def attempt() -> int:
            while True:
                dsns, version = self._read_list()
                if len(dsns) > expected_count and dsns[expected_count] == dsn:
                    return expected_count
                if len(dsns) != expected_count:
                    raise Conflict(
                        f"the cluster has {len(dsns)} shards, not {expected_count}: "
                        "another shard was added meanwhile",
                        shards=len(dsns),
                    )
                data = json.dumps({"dsns": [*dsns, dsn]}).encode()
                try:
                    if version < 0:
                        self._client.create(self.list_path, data, makepath=True)
                    else:
                        self._client.set(self.list_path, data, version=version)
                    return expected_count
                except (BadVersionError, NodeExistsError):
                    continue

        index: int = self._retry(attempt)
        return index

    def _read_list(self) -> tuple[tuple[str, ...], int]:
        try:
            data, stat = self._client.get(self.list_path)
        except NoNodeError:
            return self.configured, -1
        return self._merge(data), stat.version

    def _merge(self, data: bytes | None) -> tuple[str, ...]:
        """The configured DSNs, then the stored list's entries past them: this
        process may reach the first shards under other host names."""
        if not data:
            return self.configured
        stored = json.loads(data)["dsns"]
        return self.configured + tuple(stored[len(self.configured) :])

    def retired(self) -> frozenset[int]:
        """The shards drained out: a rebalance gives them no slot."""
        try:
            data, _ = self._retry(self._client.get, self.retired_path)
        except NoNodeError:
            return frozenset()
        return frozenset(json.loads(data)["shards"]) if data else frozenset()

    def set_retired(self, shard: int, retired: bool) -> None:
        def attempt() -> None:
            while True:
                try:
                    data, stat = self._client.get(self.retired_path)
                    version = stat.version
                except NoNodeError:
                    data, version = b"", -1
                now = set(json.loads(data)["shards"]) if data else set()
                wanted = now | {shard} if retired else now - {shard}
                if wanted == now and version >= 0:
                    return
                body = json.dumps({"shards": sorted(wanted)}).encode()
                try:
                    if version < 0:
                        self._client.create(self.retired_path, body, makepath=True)
                    else:
                        self._client.set(self.retired_path, body, version=version)
                    return
                except (BadVersionError, NodeExistsError):
                    continue

        self._retry(attempt)

    # -- both, watched -------------------------------------------------------

    def read_map(self) -> SlotMap:
        return self.slotmap.read()

    def replace_map(self, expected_epoch: int, new: SlotMap) -> SlotMap:
        return self.slotmap.replace(expected_epoch, new)

    def current(self) -> Topology:
        return Topology(self.shard_dsns(), self.slotmap.current())

    def watch(self, listener: Callable[[Topology], None]) -> None:
        """Call ``listener`` (from kazoo's thread) with the topology each time
        the shard list or the slot map changes; once at once."""

        def on_list(data: bytes | None, _stat: ZnodeStat | None) -> None:
            try:
                dsns = self._merge(data)
            except (ValueError, KeyError):
                log.exception("unreadable shard list at %s", self.list_path)
                return
            with self._lock:
                self._dsns = dsns
            listener(Topology(dsns, self.slotmap.current()))

        def on_map(seen: SlotMap) -> None:
            with self._lock:
                dsns = self._dsns
            listener(Topology(dsns if dsns is not None else self.shard_dsns(), seen))

        self._client.DataWatch(self.list_path, on_list)
        self.slotmap.watch(on_map)

    # -- the move under way --------------------------------------------------

    def read_move(self) -> tuple[dict[str, Any] | None, int]:
        """The move record and its version (None, -1 when there is none)."""
        try:
            data, stat = self._retry(self._client.get, self.move_path)
        except NoNodeError:
            return None, -1
        return (json.loads(data) if data else None), stat.version

    def write_move(self, record: dict[str, Any], version: int) -> int:
        """Store ``record`` if the stored one is at ``version`` (-1: none yet);
        :class:`Conflict` otherwise, so a mover that lost its lock stops."""
        data = json.dumps(record, separators=(",", ":")).encode()
        try:
            if version < 0:
                self._retry(self._client.create, self.move_path, data, makepath=True)
                return 0
            stat: ZnodeStat = self._retry(self._client.set, self.move_path, data, version=version)
            return int(stat.version)
        except (BadVersionError, NodeExistsError) as exc:
            raise Conflict("the move record changed under this mover; another mover runs") from exc

    def holds(self, lock: Lock) -> Callable[[], bool]:
        """A check that ``lock`` is still ours: held, on a connected session."""
        return lambda: bool(lock.is_acquired) and self._client.state == KazooState.CONNECTED

    @staticmethod
    def try_lock(lock: Lock, timeout: float) -> bool:
        """Take ``lock`` within ``timeout`` seconds; False if another holds it."""
        try:
            return bool(lock.acquire(blocking=True, timeout=timeout))
        except LockTimeout:
            return False

    def mover_lock(self, identifier: str) -> Lock:
        """The cluster's one mover lock (kazoo's lock recipe: ephemeral, so a
        dead mover's lock goes with its session)."""
        return self._client.Lock(self.lock_path, identifier)
