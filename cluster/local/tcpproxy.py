"""A TCP proxy for fault injection: put it between a client and a server.

It forwards bytes both ways and, on command, fails the way networks fail:

* :meth:`TcpProxy.blackhole`: a partition. No byte crosses in either direction
  and no new connection is accepted, but every socket stays open, so neither
  side learns anything until its own timeouts fire. Bytes sent meanwhile are
  held, the way TCP retransmission would hold them, and delivered on
  :meth:`TcpProxy.restore` if the connection is still there.
* :meth:`TcpProxy.cut`: every current connection is reset; new ones are accepted.
* :meth:`TcpProxy.refuse`: every current connection is reset and new ones are
  refused (the listening socket is closed) until :meth:`TcpProxy.restore`.
* :meth:`TcpProxy.drop_reply_after`: an ambiguous commit. The next chunk
  from a client that contains a pattern (``COMMIT``, an ``INSERT``) is
  forwarded, and the connection is reset as the server's answer comes back:
  the server did the work, the client never hears of it.

Protocol agnostic: ZooKeeper, PostgreSQL, HTTP. One thread per direction per
connection, which is plenty for tests.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time

from cluster.local.childproc import StartStopContext

__all__ = ["TcpProxy"]

_CHUNK = 65536


def _reset(sock: socket.socket) -> None:
    """Abort a connection: the peer sees a reset, as when a link drops."""
    with contextlib.suppress(OSError):
        # Linger 0 turns close() into an RST instead of an orderly FIN.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        # Wakes a thread blocked in recv() on this socket (close() alone does
        # not) without sending the peer anything.
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


class _Pipe:
    """One proxied connection: a client socket and its upstream socket."""

    def __init__(self, downstream: socket.socket, upstream: socket.socket) -> None:
        self.downstream = downstream
        self.upstream = upstream
        self._closed = False
        self._lock = threading.Lock()
        self._open_directions = 2
        # Set once a chunk matching drop_reply_after() went up: the next
        # answer down resets the connection instead.
        self.doomed = False

    @property
    def aborted(self) -> bool:
        return self._closed

    def direction_done(self) -> bool:
        """Record that one direction has ended; True when both have."""
        with self._lock:
            self._open_directions -= 1
            return self._open_directions <= 0

    def reset(self) -> None:
        """Close both sockets with an RST, the way a dropped link looks to both ends."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _reset(self.downstream)
        _reset(self.upstream)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for sock in (self.downstream, self.upstream):
            with contextlib.suppress(OSError):
                sock.close()


class TcpProxy(StartStopContext):
    """Forward ``listen_host:port`` to ``target_host:target_port``."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        connect_timeout: float = 5.0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.host = listen_host
        self.port = listen_port
        self.connect_timeout = connect_timeout
        self._cond = threading.Condition()
        self._blackholed = False
        self._refusing = False
        self._stopped = True
        self._drop_pattern: bytes | None = None
        self._drop_left = 0
        self.dropped_replies = 0
        self._inflight = 0
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._pipes: set[_Pipe] = set()
        self._threads: set[threading.Thread] = set()
        self._accept_thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        """``host:port`` to give clients instead of the target's."""
        return f"{self.host}:{self.port}"

    @property
    def connection_count(self) -> int:
        with self._cond:
            return len(self._pipes)

    # -- lifecycle --------------------------------------------------------

    def start(self) -> TcpProxy:
        with self._cond:
            if not self._stopped:
                return self
            self._stopped = False
            self._listen()
            # Wakes the accept loop out of select() when the mode changes.
            self._wake_r, self._wake_w = socket.socketpair()
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name=f"tcpproxy-accept-{self.port}", daemon=True
        )
        self._accept_thread.start()
        return self

    def stop(self) -> None:
        """Close everything and end every thread. Idempotent."""
        with self._cond:
            if self._stopped:
                return
            self._stopped = True
            self._blackholed = False
            self._refusing = False
            self._cond.notify_all()
            pipes = list(self._pipes)
            self._pipes.clear()
            self._close_listener()
        self._wake()
        for pipe in pipes:
            pipe.reset()
        if self._accept_thread is not None:
            self._accept_thread.join(5)
        for thread in list(self._threads):
            thread.join(5)
        for sock in (self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        self._wake_r = self._wake_w = None

    # -- faults -----------------------------------------------------------

    def blackhole(self) -> None:
        """Stop forwarding in both directions and stop accepting; keep sockets open."""
        with self._cond:
            self._blackholed = True
            # A chunk already past the gate is on its way out; wait for it so
            # that after this call returns, nothing more crosses.
            deadline = time.monotonic() + 2.0
            while self._inflight and time.monotonic() < deadline:
                self._cond.wait(0.05)

    def cut(self) -> None:
        """Reset every current connection; keep accepting new ones."""
        with self._cond:
            pipes = list(self._pipes)
            self._pipes.clear()
        for pipe in pipes:
            pipe.reset()

    def refuse(self) -> None:
        """Reset every current connection and refuse new ones until :meth:`restore`."""
        with self._cond:
            self._refusing = True
            self._close_listener()
        self._wake()
        self.cut()

    def drop_reply_after(self, pattern: bytes, times: int = 1) -> None:
        """For the next ``times`` client chunks containing ``pattern``: forward
        the chunk, then reset the connection when the server answers, before
        the answer reaches the client. ``times=0`` disarms."""
        with self._cond:
            self._drop_pattern = pattern if times > 0 else None
            self._drop_left = times

    def _arm(self, pipe: _Pipe, data: bytes) -> None:
        with self._cond:
            if self._drop_pattern is not None and self._drop_pattern in data:
                self._drop_left -= 1
                if self._drop_left <= 0:
                    self._drop_pattern = None
                pipe.doomed = True

    def restore(self) -> None:
        """Undo :meth:`blackhole` and :meth:`refuse`: forward and accept again."""
        with self._cond:
            if self._refusing and not self._stopped:
                self._listen()
            self._refusing = False
            self._blackholed = False
            self._cond.notify_all()
        self._wake()

    # -- internals --------------------------------------------------------

    def _listen(self) -> None:
        # Called with _cond held. The port is kept across refuse()/restore().
        deadline = time.monotonic() + 5.0
        while True:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((self.host, self.port))
            except OSError:
                sock.close()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
                continue
            sock.listen(128)
            self.port = sock.getsockname()[1]
            self._listener = sock
            return

    def _close_listener(self) -> None:
        if self._listener is not None:
            # shutdown() stops listening at once; close() alone would leave the
            # socket accepting into its backlog while select() still holds it.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                self._listener.close()
            self._listener = None

    def _wake(self) -> None:
        wake_w = self._wake_w
        if wake_w is not None:
            with contextlib.suppress(OSError):
                wake_w.send(b"\0")

    def _accept_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (self._blackholed or self._refusing):
                    # Pending connections wait in the kernel's backlog, which is
                    # what a partition looks like to a connecting client.
                    self._cond.wait()
                if self._stopped:
                    return
                listener = self._listener
                wake_r = self._wake_r
            if listener is None or wake_r is None:
                continue
            try:
                ready, _, _ = select.select([listener, wake_r], [], [])
            except (OSError, ValueError):
                continue  # the listener was closed under us by refuse()/stop()
            if wake_r in ready:
                with contextlib.suppress(OSError):
                    wake_r.recv(4096)
            if listener not in ready:
                continue
            with self._cond:
                if self._stopped or self._blackholed or self._refusing:
                    continue
            try:
                downstream, _ = listener.accept()
            except OSError:
                continue
            self._connect(downstream)

    def _connect(self, downstream: socket.socket) -> None:
        try:
            upstream = socket.create_connection(
                (self.target_host, self.target_port), timeout=self.connect_timeout
            )
        except OSError:
            # The target is down: the client sees its connection reset, as it
            # would if it had connected to the target itself.
            _reset(downstream)
            return
        upstream.settimeout(None)
        downstream.settimeout(None)
        for sock in (upstream, downstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pipe = _Pipe(downstream, upstream)
        with self._cond:
            if self._stopped:
                pipe.reset()
                return
            self._pipes.add(pipe)
        for src, dst, name in ((downstream, upstream, "up"), (upstream, downstream, "down")):
            thread = threading.Thread(
                target=self._pump,
                args=(pipe, src, dst, name == "up"),
                name=f"tcpproxy-{self.port}-{name}",
                daemon=True,
            )
            with self._cond:
                self._threads.add(thread)
            thread.start()

    def _pump(self, pipe: _Pipe, src: socket.socket, dst: socket.socket, upward: bool) -> None:
        try:
            while True:
                try:
                    data = src.recv(_CHUNK)
                except OSError:
                    data = None
                if pipe.aborted:
                    # reset() woke us; passing on the EOF we read would send
                    # the other end an orderly FIN instead of the reset.
                    return
                if not self._pass_gate():
                    return
                try:
                    if data and not upward and pipe.doomed:
                        # The server answered what it was sent: the client
                        # must not hear it.
                        with self._cond:
                            self.dropped_replies += 1
                        pipe.reset()
                        return
                    if data:
                        if upward:
                            self._arm(pipe, data)
                        dst.sendall(data)
                    elif data == b"":
                        # Half-close, so the other direction can still drain.
                        with contextlib.suppress(OSError):
                            dst.shutdown(socket.SHUT_WR)
                        return
                    else:
                        pipe.reset()
                        return
                except OSError:
                    pipe.reset()
                    return
                finally:
                    self._leave_gate()
        finally:
            if pipe.direction_done():
                pipe.close()
                with self._cond:
                    self._pipes.discard(pipe)
            with self._cond:
                self._threads.discard(threading.current_thread())

    def _pass_gate(self) -> bool:
        """Wait while blackholed; False if the proxy stopped meanwhile."""
        with self._cond:
            while self._blackholed and not self._stopped:
                self._cond.wait()
            if self._stopped:
                return False
            self._inflight += 1
            return True

    def _leave_gate(self) -> None:
        with self._cond:
            self._inflight -= 1
            self._cond.notify_all()
