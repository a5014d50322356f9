"""The slot map in ZooKeeper: read, watched, and replaced by compare-and-set.

Layout: ``{root}/slotmap`` holds :meth:`shardmap.SlotMap.to_json`. An absent
node means epoch 0 (``slot % N`` of the configured shards), so a cluster that
never resharded needs no write and routes as it always did.

The map routes; the shards fence (each write checks its slot inside its own
transaction). So a process that reads an old epoch only sends a write to a
shard that refuses it, and the watch here is an optimisation, not a guarantee.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import KazooRetry

from cluster.errors import Conflict
from shardmap import SlotMap

__all__ = ["StaleSlotMap", "ZkSlotMap"]

log = logging.getLogger(__name__)


class StaleSlotMap(Conflict):
    """The stored map is not at the epoch the writer planned against."""


class ZkSlotMap:
    """One cluster's slot map under ``root``. Thread-safe; calls block and
    run under kazoo's retry, so a dropped connection is retried, and a write
    whose answer was lost is recognised when the retry finds it stored."""

    def __init__(
        self,
        client: KazooClient,
        root: str,
        shard_count: int,
        retry: KazooRetry | None = None,
    ) -> None:
        self._client = client
        self.path = root.rstrip("/") + "/slotmap"
        self._shard_count = shard_count
        self._retry = retry or KazooRetry(max_tries=5, delay=0.1, max_delay=2.0)
        self._lock = threading.Lock()
        self._current: SlotMap | None = None

    def read(self) -> SlotMap:
        """The stored map (epoch 0 of the configured shards when none is stored)."""
        stored, _ = self._read()
        return stored

    def current(self) -> SlotMap:
        """The newest map this process has seen (read once if never seen)."""
        with self._lock:
            seen = self._current
        return seen if seen is not None else self._remember(self.read())

    def replace(self, expected_epoch: int, new: SlotMap) -> SlotMap:
        """Store ``new`` (epoch ``expected_epoch + 1``) if the stored map is at
        ``expected_epoch``; else raise :class:`StaleSlotMap`. Idempotent: a
        retried call that finds ``new`` already stored succeeds."""
        if new.epoch != expected_epoch + 1:
            raise ValueError(
                f"the next map of epoch {expected_epoch} is {expected_epoch + 1}, not {new.epoch}"
            )
        data = new.to_json()

        def attempt() -> None:
            while True:
                stored, version = self._read()
                if stored == new:
                    return  # our own earlier try, whose answer was lost
                if stored.epoch != expected_epoch:
                    raise StaleSlotMap(
                        f"the slot map is at epoch {stored.epoch}, not {expected_epoch}",
                        epoch=stored.epoch,
                        expected=expected_epoch,
                    )
                try:
                    if version < 0:
                        self._client.create(self.path, data, makepath=True)
                    else:
                        self._client.set(self.path, data, version=version)
                    return
                except (BadVersionError, NodeExistsError):
                    # Written between our read and our write, by another mover
                    # or by our own try whose answer was lost: read and decide.
                    continue

        self._retry(attempt)
        return self._remember(new)

    def watch(self, listener: Callable[[SlotMap], None]) -> None:
        """Call ``listener`` with each newer map (from kazoo's thread)."""

        delivered: list[int | None] = [None]

        def on_change(data: bytes | None, _stat: ZnodeStat | None) -> None:
            try:
                seen = self._decode(data)
            except ValueError:
                log.exception(
                    "unreadable slot map at %s; keeping epoch %s", self.path, self._current
                )
                return
            with self._lock:
                newer = delivered[0] is None or seen.epoch > delivered[0]
                if newer:
                    delivered[0] = seen.epoch
                if self._current is None or seen.epoch > self._current.epoch:
                    self._current = seen
            if newer:
                # Newer than this listener last got: this process's own
                # replace() may have remembered it already.
                listener(seen)

        self._client.DataWatch(self.path, on_change)

    def _read(self) -> tuple[SlotMap, int]:
        try:
            data, stat = self._client.get(self.path)
        except NoNodeError:
            return SlotMap.modulo(self._shard_count), -1
        return self._decode(data), stat.version

    def _decode(self, data: bytes | None) -> SlotMap:
        return SlotMap.modulo(self._shard_count) if data is None else SlotMap.from_json(data)

    def _remember(self, seen: SlotMap) -> SlotMap:
        with self._lock:
            if self._current is None or seen.epoch > self._current.epoch:
                self._current = seen
            return self._current
