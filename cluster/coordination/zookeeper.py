"""ZooKeeper coordination: membership, shard ownership and per-shard leadership.

Layout under ``root`` (itself inside the connect string's chroot, if any)::

    {root}/members/{member_id}                 ephemeral; JSON {id, host, pid, version, startedAt}
    {root}/shards/{i}/leader/{tag}__lock__{n}  ephemeral sequential; data = the member id

**Ownership** is a pure function of the live member ids (:func:`assign_shards`),
so every worker computes the same map from the same member list and no lock
protocol is needed: ownership is only a hint (DESIGN.md, invariant 7).

**Leadership** of shard ``i``: its current owners each keep a contender node
under ``{root}/shards/{i}/leader`` and the lowest leads (:mod:`.contenders`).
``is_leader(i)`` is true only while (a) our node is the lowest, (b) the session
is CONNECTED (SUSPENDED stops leader-only work at once, not at LOST) and (c) a
ZooKeeper round trip sent recently enough has been answered (:mod:`.fence`:
what guards against packets blackholed with sockets left open).

While ZooKeeper is unreachable, :meth:`ZkCoordinator.owned_shards` keeps the
last known set: workers keep claiming, the database lease is the safety net.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.retry import KazooRetry

from cluster import metrics
from cluster.coordination.assignment import assign_shards
from cluster.coordination.base import Member
from cluster.coordination.contenders import Contenders
from cluster.coordination.fence import CONFIRM_MAX_AGE, RoundTripFence
from cluster.coordination.znodes import (
    close_client,
    ensure_chroot,
    normalize_root,
    register_member,
    unregister_member,
)
from cluster.errors import CoordinationUnavailable

__all__ = ["CONFIRM_MAX_AGE", "ZkCoordinator"]

log = logging.getLogger(__name__)

_STATES = (KazooState.CONNECTED, KazooState.SUSPENDED, KazooState.LOST)


class ZkCoordinator:
    """:class:`cluster.coordination.Coordinator` on ZooKeeper through kazoo.

    ``connect`` is a kazoo host string, optionally with a chroot
    (``"zk1:2181,zk2:2181/vakit-prod"``), created at start if missing.
    ``session_timeout`` (seconds) is asked of ZooKeeper, whose
    ``min/maxSessionTimeout`` must allow it: a server that negotiates it down
    would expire us sooner than the leadership fence assumes.

    Threads: kazoo's own, one worker that does every blocking ZooKeeper call
    (registration, reads, contender nodes), and the fence's prober that
    confirms round trips. Listener callbacks run on any of them and must not block.
    """

    def __init__(
        self,
        connect: str,
        *,
        member: Member,
        shard_count: int,
        session_timeout: float = 10.0,
        root: str = "/vakit",
        start_timeout: float = 30.0,
    ) -> None:
        if shard_count < 1:
            raise ValueError(f"shard_count must be at least 1, got {shard_count}")
        if session_timeout <= 0:
            raise ValueError(f"session_timeout must be positive, got {session_timeout}")
        if not member.id or "/" in member.id or member.id in (".", ".."):
            raise ValueError(f"member id must be a plain ZooKeeper node name, got {member.id!r}")
        self.member_id = member.id
        self.member = member
        self.shard_count = shard_count
        self.session_timeout = session_timeout
        self.connect = connect
        self._root = normalize_root(root)
        self._members_path = f"{self._root}/members"
        self._member_path = f"{self._members_path}/{member.id}"
        self._start_timeout = start_timeout
        self._resync_interval = session_timeout
        self._client = KazooClient(
            hosts=connect,
            timeout=session_timeout,
            # Reconnect forever; the cap keeps recovery after an outage quick.
            connection_retry=KazooRetry(
                max_tries=-1,
                delay=0.1,
                backoff=2,
                max_delay=min(2.0, max(0.5, session_timeout / 4)),
            ),
            command_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0),
        )
        # The worker's retry never crosses a session change (ignore_expire=False):
        # what it was doing belongs to the old session and is redone from scratch.
        self._retry = KazooRetry(
            max_tries=-1,
            delay=0.05,
            backoff=2,
            max_delay=1.0,
            deadline=session_timeout,
            ignore_expire=False,
        )
        self._contenders = Contenders(
            self._client,
            self._retry,
            root=self._root,
            shard_count=shard_count,
            member_id=member.id,
            watch=self._on_shard_event,
        )
        self._fence = RoundTripFence(
            self._client,
            session_timeout=session_timeout,
            path=self._root,
            on_tick=self._publish,
            name=f"zkcoord-prober-{member.id}",
        )

        self._lock = threading.Lock()
        # Everything below is guarded by _lock.
        self._state: str = KazooState.LOST
        self._members: frozenset[str] | None = None
        self._owned: frozenset[int] = frozenset()
        self._dirty: set[int] = set()
        self._dirty_all = True
        self._members_dirty = True
        self._forced: dict[int, bool] = {}
        self._published_led: frozenset[int] = frozenset()
        self._published_owned: frozenset[int] = frozenset()
        self._listeners: list[Callable[[], None]] = []
        self._started = False
        self._stopped = False

        # Only the worker thread touches this.
        self._registered_session: int | None = None

        self._wake = threading.Event()
        self._closing = threading.Event()
        self._ready = threading.Event()
        self._worker = threading.Thread(
            target=self._run_worker, name=f"zkcoord-worker-{member.id}", daemon=True
        )

    # -- the Coordinator interface -----------------------------------------

    @property
    def client(self) -> KazooClient:
        """The kazoo client, for diagnostics and fault-injection tests only."""
        return self._client

    def start(self) -> None:
        """Connect, register and read membership; raise CoordinationUnavailable on timeout."""
        with self._lock:
            if self._started:
                return
            if self._stopped:
                raise RuntimeError("a stopped ZkCoordinator cannot be started again")
            self._started = True
        self._set_state_metric(KazooState.LOST)
        self._client.add_listener(self._on_state)
        deadline = time.monotonic() + self._start_timeout
        try:
            ensure_chroot(self.connect, self._start_timeout)
            self._client.start(timeout=max(0.1, deadline - time.monotonic()))
        except (KazooTimeoutError, KazooException) as exc:
            self.stop()
            raise CoordinationUnavailable(
                f"could not connect to ZooKeeper within {self._start_timeout:g} s",
                connect=self.connect,
                member=self.member_id,
            ) from exc
        self._worker.start()
        self._fence.start()
        # Both, so that led_shards() is already true to the election on return.
        ready = self._ready.wait(max(0.0, deadline - time.monotonic()))
        if not ready or not self._fence.wait_confirmed(max(0.0, deadline - time.monotonic())):
            self.stop()
            raise CoordinationUnavailable(
                f"connected to ZooKeeper but could not register within {self._start_timeout:g} s",
                connect=self.connect,
                member=self.member_id,
            )
        owned = sorted(self.owned_shards())
        log.info("coordination started: member=%s owned=%s", self.member_id, owned)

    def stop(self) -> None:
        """Withdraw from elections, delete the member node, close the session. Idempotent.

        Leadership ends before any network call; ``owned_shards()`` is empty afterwards.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            started = self._started
            # A stopped worker polls nothing; the metric should say so too.
            self._owned = frozenset()
        self._closing.set()
        self._wake.set()
        self._fence.close()
        self._publish()  # leadership ends now, before any network call
        if not started:
            return
        if self._client.state == KazooState.CONNECTED:
            # Let a pass in progress finish so it does not recreate what we
            # delete. While disconnected the worker may sit in a queued call
            # until the client closes below, so there is no waiting for it then.
            self._join(self._worker, 1.0)
            try:
                self._withdraw()
            except (KazooException, KazooTimeoutError) as exc:
                # Closing the session below removes our ephemeral nodes anyway.
                log.info("coordination: withdraw incomplete, closing session instead: %s", exc)
        close_client(self._client)  # ends the session: our ephemeral nodes go with it
        self._join(self._worker, 5.0)
        self._fence.join(5.0)
        log.info("coordination stopped: member=%s", self.member_id)

    @staticmethod
    def _join(thread: threading.Thread, timeout: float) -> None:
        if thread.ident is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def owned_shards(self) -> frozenset[int]:
        with self._lock:
            return self._owned

    def is_leader(self, shard: int) -> bool:
        with self._lock:
            return self._is_leader_locked(shard, time.monotonic())

    def led_shards(self) -> frozenset[int]:
        with self._lock:
            return self._led_locked(time.monotonic())

    def grow(self, shard_count: int) -> None:
        """Shards were added to the running cluster: share them out too."""
        self._contenders.grow(self._root, shard_count)
        with self._lock:
            if shard_count <= self.shard_count:
                return
            self.shard_count = shard_count
            self._members_dirty = True
            self._dirty_all = True
        self._wake.set()

    def add_listener(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(callback)

    def force_leader(self, shard: int, value: bool | None) -> None:
        """Test hook: make ``is_leader(shard)`` return ``value``; None restores the election."""
        with self._lock:
            if value is None:
                self._forced.pop(shard, None)
            else:
                self._forced[shard] = value
        self._publish()

    def session_state(self) -> str:
        """CONNECTED, SUSPENDED or LOST, as this coordinator last heard from kazoo."""
        with self._lock:
            return self._state

    # -- leadership as seen by readers -------------------------------------

    def _is_leader_locked(self, shard: int, now: float) -> bool:
        if self._stopped:
            return False
        forced = self._forced.get(shard)
        if forced is not None:
            return forced
        return (
            self._state == KazooState.CONNECTED
            and self._contenders.holds(shard)
            and shard in self._owned
            and self._fence.holds(now)
        )

    def _led_locked(self, now: float) -> frozenset[int]:
        return frozenset(s for s in range(self.shard_count) if self._is_leader_locked(s, now))

    def _publish(self) -> None:
        """Diff leadership and ownership against what listeners last heard; tell them."""
        with self._lock:
            led = self._led_locked(time.monotonic())
            owned = self._owned
            gained = led - self._published_led
            lost = self._published_led - led
            owned_changed = owned != self._published_owned
            self._published_led = led
            self._published_owned = owned
            # Set under the lock so two threads publishing cannot leave the older value.
            metrics.SHARDS_LED.set(len(led))
            metrics.SHARDS_OWNED.set(len(owned))
            listeners = list(self._listeners) if gained or lost or owned_changed else []
        for shard in sorted(gained):
            metrics.LEADERSHIP_CHANGES.labels(shard=str(shard), change="gained").inc()
            log.info("leadership gained: member=%s shard=%d", self.member_id, shard)
        for shard in sorted(lost):
            metrics.LEADERSHIP_CHANGES.labels(shard=str(shard), change="lost").inc()
            log.info("leadership lost: member=%s shard=%d", self.member_id, shard)
        if owned_changed:
            log.info("ownership: member=%s shards=%s", self.member_id, sorted(owned))
        for callback in listeners:
            try:
                callback()
            except Exception:
                log.exception("coordination listener failed: member=%s", self.member_id)

    # -- kazoo callbacks (kazoo's threads: never block here) ----------------

    def _on_state(self, state: str) -> None:
        with self._lock:
            self._state = state
            if state == KazooState.LOST:
                self._contenders.session_lost()
            elif state == KazooState.CONNECTED:
                # kazoo dropped every watch when the connection went.
                self._dirty_all = True
                self._members_dirty = True
        self._set_state_metric(state)
        log.info("zookeeper session %s: member=%s", state, self.member_id)
        self._wake.set()
        self._fence.kick()
        self._publish()

    def _on_members_event(self, event: WatchedEvent) -> None:
        with self._lock:
            self._members_dirty = True
        self._wake.set()

    def _on_shard_event(self, event: WatchedEvent) -> None:
        shard = self._contenders.shard_of(getattr(event, "path", None) or "")
        with self._lock:
            if shard is None:
                self._dirty_all = True
            else:
                self._dirty.add(shard)
        self._wake.set()

    @staticmethod
    def _set_state_metric(state: str) -> None:
        for name in _STATES:
            metrics.ZK_SESSION_STATE.labels(state=name).set(1 if name == state else 0)

    # -- worker thread ------------------------------------------------------

    def _run_worker(self) -> None:
        backoff = 0.05
        while not self._closing.is_set():
            woke = self._wake.wait(self._resync_interval)
            if self._closing.is_set():
                break
            self._wake.clear()
            if not woke:
                # A periodic full pass, in case a watch was ever missed.
                with self._lock:
                    self._dirty_all = True
                    self._members_dirty = True
            try:
                self._reconcile()
                backoff = 0.05
            except Exception as exc:
                if self._closing.is_set():
                    break
                if isinstance(exc, KazooException):
                    log.warning("coordination: ZooKeeper call failed, will retry: %r", exc)
                else:
                    log.exception("coordination: reconcile failed, will retry")
                with self._lock:
                    self._dirty_all = True
                    self._members_dirty = True
                if self._closing.wait(backoff):
                    break
                backoff = min(backoff * 2, 1.0)
                self._wake.set()
            self._publish()

    def _reconcile(self) -> None:
        """One pass: registration, ownership, contender nodes. Idempotent."""
        if self._client.state != KazooState.CONNECTED:
            return  # the CONNECTED transition wakes us again
        client_id = self._client.client_id
        if client_id is None:
            return
        session = int(client_id[0])
        gen = self._contenders.generation()
        if self._registered_session != session:
            register_member(self._client, self._retry, self._member_path, self.member, session)
            log.info("registered member %s in session 0x%x", self.member_id, session)
            self._registered_session = session
            with self._lock:
                self._dirty_all = True
                self._members_dirty = True

        with self._lock:
            members_dirty = self._members_dirty
            self._members_dirty = False
        if members_dirty:
            children = self._retry(
                self._client.get_children, self._members_path, watch=self._on_members_event
            )
            self._apply_membership(children)

        with self._lock:
            candidates = self._owned | self._contenders.touched()
            if self._dirty_all:
                todo = set(candidates)
            else:
                todo = self._dirty & candidates
            self._dirty_all = False
            self._dirty = set()
            wanted = frozenset() if self._closing.is_set() else self._owned
        for shard in sorted(todo):
            self._contenders.reconcile(shard, shard in wanted, session, gen)
        self._ready.set()

    def _apply_membership(self, children: Iterable[str]) -> None:
        ids = set(children)
        if self.member_id not in ids:
            # Someone deleted our node: register again on the next pass.
            self._registered_session = None
            self._wake.set()
        ids.add(self.member_id)
        members = frozenset(ids)
        owned = assign_shards(sorted(members), self.shard_count).get(self.member_id, frozenset())
        with self._lock:
            if self._stopped:
                return
            if self._members is not None and members != self._members:
                metrics.REBALANCES.inc()
                log.info("rebalance: member=%s members=%s", self.member_id, sorted(members))
            self._members = members
            if owned != self._owned:
                self._dirty |= owned ^ self._owned
                self._owned = owned

    def _withdraw(self) -> None:
        """Delete our contender nodes, then our member node; best effort, bounded
        so that stop() returns even if the connection drops meanwhile."""
        deadline = time.monotonic() + min(2.0, self.session_timeout / 2)
        client_id = self._client.client_id
        self._contenders.withdraw(deadline)
        if client_id is not None:
            unregister_member(self._client, self._member_path, client_id[0], deadline)
