"""Contender nodes: how a member stands for the leadership of the shards it owns.

Each current owner of shard ``i`` keeps one ephemeral sequential node under
``{root}/shards/{i}/leader``; the lowest sequence leads. The nodes have the
shape of kazoo's ``Lock`` recipe (``…__lock__<seq>``, the member id as data), so
``Lock.contenders()`` and ``zkCli`` read them as a lock. We keep them from one
reconciling thread instead of a blocking ``Lock.acquire()`` thread per shard
because that recipe's private retry sleeps grow to a minute over a long wait (a
stalled failover) and a cancelled acquire can leave its node behind while the
session lives (a shard nobody may lead).

Our nodes are named ``{nonce}-{session}-__lock__{seq}``. The nonce tells ours
from other processes' (even with the same member id); the session part tells
live nodes from ones a retried create left behind across a session change,
which we then delete. Every write is retry-safe: a create whose reply was lost
is looked for before a second one is made, and a delete of a node already gone
is done.

Holding the lowest node is only half of leading: the coordinator also asks the
session state and the time fence (:mod:`.fence`) before it says ``is_leader``.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import WatchedEvent
from kazoo.retry import KazooRetry

from cluster.coordination.znodes import CONTENDER_RE, LOCK_MARK, leader_path, sequence, wait_by

__all__ = ["Contenders"]


class Contenders:
    """This process's contender nodes (at most one per shard) and which of them lead.

    :meth:`reconcile` runs on one thread at a time (the coordinator's worker);
    :meth:`holds`, :meth:`generation` and :meth:`session_lost` are safe from
    any thread and never wait on the network. ``watch`` is set on every
    listing of a shard's contenders, so a change there wakes the caller.
    """

    def __init__(
        self,
        client: KazooClient,
        retry: KazooRetry,
        *,
        root: str,
        shard_count: int,
        member_id: str,
        watch: Callable[[WatchedEvent], None],
    ) -> None:
        self._client = client
        self._retry = retry
        self._data = member_id.encode()
        self._watch = watch
        self._paths = [leader_path(root, i) for i in range(shard_count)]
        self._shard_by_path = {path: i for i, path in enumerate(self._paths)}
        self._nonce = uuid.uuid4().hex[:16]
        self._lock = threading.Lock()
        # Guarded by _lock.
        self._generation = 0  # bumped at session loss: results read before it are void
        self._holding: set[int] = set()  # shards whose lowest contender is ours
        self._touched: set[int] = set()  # shards where we may still have a node

    def grow(self, root: str, shard_count: int) -> None:
        """Contend for shards added to the running cluster too."""
        with self._lock:
            for i in range(len(self._paths), shard_count):
                path = leader_path(root, i)
                self._paths.append(path)
                self._shard_by_path[path] = i

    def shard_of(self, path: str) -> int | None:
        """The shard whose leader path ``path`` is, if any (for watch events)."""
        return self._shard_by_path.get(path)

    def holds(self, shard: int) -> bool:
        with self._lock:
            return shard in self._holding

    def generation(self) -> int:
        """Read before a reconciling pass and hand to :meth:`reconcile`."""
        with self._lock:
            return self._generation

    def touched(self) -> frozenset[int]:
        """Shards where a node of ours may exist: they need a pass even if not owned."""
        with self._lock:
            return frozenset(self._touched)

    def session_lost(self) -> None:
        """Our ephemeral nodes died with the session: we lead nothing."""
        with self._lock:
            self._holding.clear()
            self._generation += 1

    def reconcile(self, shard: int, want: bool, session: int, generation: int) -> None:
        """Make our node for ``shard`` exist in ``session`` iff ``want``; see whether it leads.

        A pass begun in an older ``generation`` (before a session loss) never
        records a lead: the nodes it saw died with that session.
        """
        path = self._paths[shard]
        tag = f"{self._nonce}-{session:x}-"
        try:
            children = self._list(path)
        except NoNodeError:
            if not want:
                with self._lock:
                    self._touched.discard(shard)
                    self._holding.discard(shard)
                return
            self._retry(self._client.ensure_path, path)
            children = self._list(path)

        mine = [c for c in children if c.startswith(self._nonce)]
        current = sorted((c for c in mine if c.startswith(tag)), key=sequence)
        doomed = [c for c in mine if not c.startswith(tag)]
        doomed += current[1:] if want else current
        if not want or not current:
            # Stop leading before our node goes, never after.
            with self._lock:
                self._holding.discard(shard)
        for node in doomed:
            with contextlib.suppress(NoNodeError):
                self._retry(self._client.delete, f"{path}/{node}")
        if want and not current:
            # Recorded first, so a create that fails halfway is still cleaned up.
            with self._lock:
                self._touched.add(shard)
            self._create(path, tag)
            children = self._list(path)

        gone = set(doomed)
        contenders = sorted(
            (c for c in children if CONTENDER_RE.search(c) and c not in gone), key=sequence
        )
        leads = want and bool(contenders) and contenders[0].startswith(tag)
        with self._lock:
            if want:
                self._touched.add(shard)
            else:
                self._touched.discard(shard)
            if leads and generation == self._generation:
                self._holding.add(shard)
            else:
                self._holding.discard(shard)

    def withdraw(self, deadline: float) -> None:
        """Stop leading at once, then delete every node of ours; best effort until ``deadline``.

        Async calls bounded by the deadline (monotonic seconds), never kazoo's
        blocking ones: if the connection drops meanwhile, a blocking call would
        wait for a reconnect that may never come. What is left goes with the session.
        """
        with self._lock:
            shards = sorted(self._touched)
            self._holding.clear()
        client = self._client
        listings = [(self._paths[s], client.get_children_async(self._paths[s])) for s in shards]
        deletions: list[IAsyncResult] = []
        for path, listing in listings:
            try:
                children: list[str] = wait_by(listing, deadline)
            except NoNodeError:
                continue
            deletions += [
                client.delete_async(f"{path}/{node}")
                for node in children
                if node.startswith(self._nonce)
            ]
        for deletion in deletions:
            with contextlib.suppress(NoNodeError):
                wait_by(deletion, deadline)

    def _list(self, path: str) -> list[str]:
        children: list[str] = self._retry(self._client.get_children, path, watch=self._watch)
        return children

    def _create(self, path: str, tag: str) -> None:
        tried = False

        def attempt() -> None:
            nonlocal tried
            if tried:
                # The reply to a create can be lost after the node was made;
                # look for it before making a second one (kazoo Lock's trick).
                if any(c.startswith(tag) for c in self._client.get_children(path)):
                    return
            tried = True
            self._client.create(
                f"{path}/{tag}{LOCK_MARK}", self._data, ephemeral=True, sequence=True, makepath=True
            )

        self._retry(attempt)
