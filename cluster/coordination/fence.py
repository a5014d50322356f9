"""The time fence of leadership: lead only while ZooKeeper has recently heard us.

Who leads a shard is decided by contender nodes (:mod:`.contenders`), but a node
says nothing about *when* leadership ends for its holder. Another member may
take over once our session expires, one full session timeout after the server
last heard from us. The client, though, learns of a dead connection late: when
packets are blackholed with sockets left open, kazoo notices only after about
2/3 of the session timeout, by then well past the moment we should have stopped.

So leadership carries a fence in time that does not trust the client's view of
the connection. A prober sends a ``sync`` every probe interval (0.1 of the
session timeout). A reply proves the server heard us no earlier than the
request's *send* time, so nobody else can lead before ``send + session_timeout``.
:meth:`RoundTripFence.holds` is true only while a round trip sent less than
``CONFIRM_MAX_AGE * session_timeout`` ago (0.35 of it) has been answered: a
silent leader stops at ``send + 0.35 * session_timeout``, with room to spare
under the half it is allowed. ``sync`` goes through the quorum leader, so a
follower cut off from its quorum cannot vouch for us.

The prober wakes right when the fence would lapse and calls ``on_tick``, so
listeners hear of a lost leadership at once, not at the next read.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import KazooState

__all__ = ["CONFIRM_MAX_AGE", "PROBE_INTERVAL", "RoundTripFence"]

log = logging.getLogger(__name__)

# Fractions of the session timeout. A healthy connection is confirmed every
# probe interval, far within the allowed age; a silent one is fenced at the
# allowed age, with room to spare under the required half (the prober wakes
# at that moment to tell listeners).
CONFIRM_MAX_AGE = 0.35
PROBE_INTERVAL = 0.1


class RoundTripFence:
    """Has a round trip to ZooKeeper, sent recently enough, been answered?

    ``path`` is where the probe ``sync`` goes (any existing path). ``on_tick``
    runs on the prober thread after every probe round and when the fence
    lapses; it must not block. :meth:`holds` is safe from any thread and never
    waits on the network.
    """

    def __init__(
        self,
        client: KazooClient,
        *,
        session_timeout: float,
        path: str,
        on_tick: Callable[[], None],
        name: str,
    ) -> None:
        self._client = client
        self._path = path or "/"
        self._on_tick = on_tick
        self._max_age = CONFIRM_MAX_AGE * session_timeout
        self._interval = PROBE_INTERVAL * session_timeout
        self._lock = threading.Lock()
        self._confirmed_at = -math.inf  # send time of the newest answered probe; guarded
        self._confirmed_once = threading.Event()
        self._kick = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def kick(self) -> None:
        """Probe now rather than at the next interval (the session state changed)."""
        self._kick.set()

    def close(self) -> None:
        """Ask the prober to stop; :meth:`join` waits for it."""
        self._closing.set()
        self._kick.set()

    def join(self, timeout: float) -> None:
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def holds(self, now: float) -> bool:
        """Was a round trip sent after ``now - max_age`` (monotonic seconds) answered?"""
        with self._lock:
            return now - self._confirmed_at < self._max_age

    def wait_confirmed(self, timeout: float) -> bool:
        """Block until a first round trip is confirmed; False on timeout."""
        return self._confirmed_once.wait(timeout)

    def _run(self) -> None:
        # A dead prober would fence every leadership for good: never let it die.
        while not self._closing.is_set():
            try:
                self._probe_loop()
            except Exception:
                log.exception("coordination prober failed; restarting it")
                self._closing.wait(self._interval)

    def _probe_loop(self) -> None:
        """Confirm a round trip every probe interval; tell ``on_tick`` promptly."""
        pending: tuple[float, IAsyncResult] | None = None
        next_probe = 0.0
        while not self._closing.is_set():
            now = time.monotonic()
            if pending is not None and pending[1].ready():
                sent, result = pending
                pending = None
                if result.successful():
                    with self._lock:
                        self._confirmed_at = max(self._confirmed_at, sent)
                    self._confirmed_once.set()
            connected = self._client.state == KazooState.CONNECTED
            if pending is None and now >= next_probe and connected:
                # sync goes through the quorum leader, so a follower cut off
                # from its quorum cannot confirm us.
                try:
                    pending = (now, self._client.sync_async(self._path))
                except KazooException:
                    pending = None
                next_probe = now + self._interval
            self._on_tick()

            with self._lock:
                stale_in = self._confirmed_at + self._max_age - now
            wait = self._interval
            if pending is None and self._client.state == KazooState.CONNECTED:
                wait = max(0.0, next_probe - now)
            if stale_in > 0:
                # Wake right after the fence lapses, so listeners hear at once.
                wait = min(wait, stale_in + 0.001)
            if pending is not None:
                pending[1].wait(wait)
            else:
                self._kick.wait(wait)
                self._kick.clear()
