"""A psycopg connection whose socket stays watched by the event loop.

psycopg's asyncio wait registers the connection's socket with the event
loop for every wait and removes it after: for a statement answered in one
read, an ``add_reader``, a timer, a ``remove_reader``. On uvloop each
registration makes a new poll handle, and libuv checks and adds the
descriptor and removes it again: an ``ioctl`` and six ``epoll_ctl`` calls a
statement (strace of the API at 1,160 creates/s), 24 of the 81 us of client
CPU a one-row INSERT costs (loopback, one connection, 20,000 statements).

:class:`WatchedConnection` registers the socket once and keeps it
registered while the connection lives. A statement's wait for its answer is
a future that the reader callback resolves. Only the common wait is served
here, a read with no deadline. psycopg's own wait, from the same point of
the generator, serves the rest: a wait to write (a statement larger than the
socket's buffer), a wait with a timeout, an interruption (it cancels the
query on the server).

**Never watching a closed descriptor.** An event loop that still has a
descriptor registered when it is closed would not watch a new socket that
reuses its number. A new connection to a shard usually gets exactly that
number, and would wait for ever. libpq closes the socket itself when the
connection fails while reading or writing, inside a step of the
generator; ``close()`` closes it too. So the socket is unregistered before
``close()``, before any step that raised, and before psycopg's own wait
takes over (it registers the descriptor itself and removes it after).

**Readable with nothing waiting.** The server may write to an idle
connection: a notice, or the end of the connection when it terminates the
session. The loop watches level-triggered and would call back at every turn
for data that nobody reads. A second such call in a row unregisters the
socket (the first may be a readiness the loop saw before the last wait read
its data); the next statement registers it again and reads what came.

**A registration the loop drops.** uvloop closes its poll handle when the
socket reports an error (POLLERR) and calls nobody back. psycopg's wait
survives that because it wakes every 0.1 s and registers again. Here a
ticker per connection, running while waits begin, does the same for a wait
still in progress a tick after it was first seen (0.1 to 0.2 s): it wakes
the wait with nothing ready and unregisters the socket, and the wait that
follows registers it again.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any, cast

import psycopg
from psycopg import errors as e
from psycopg import generators
from psycopg.abc import RV, PQGen
from psycopg.pq import ConnStatus, ExecStatus
from psycopg.waiting import READY_NONE, READY_R, WAIT_R, Ready

__all__ = ["Statement", "WatchedConnection"]

# SQLSTATE 26000: the named statement is not prepared on the session (a
# DEALLOCATE ALL or DISCARD ALL ran there since).
_NOT_PREPARED = "26000"


class Statement:
    """A statement for :meth:`WatchedConnection.run`: its SQL with ``$n``
    placeholders, prepared under ``name`` on each connection that runs it,
    and the format of each parameter (0 text, 1 binary; all text when
    ``None``)."""

    __slots__ = ("formats", "name", "sql")

    def __init__(self, name: str, sql: str, formats: Sequence[int] | None = None) -> None:
        self.name = f"vakit_{name}".encode()
        self.sql = sql.encode()
        self.formats = formats


# psycopg's default for AsyncConnection.wait (connection_async._WAIT_INTERVAL).
_WAIT_INTERVAL = 0.1
_INTERRUPTED = (asyncio.CancelledError, KeyboardInterrupt, SystemExit)


class _Watch:
    """A descriptor registered with a loop for reading, with the future of
    the wait in progress, if any, and the ticks that find a wait stuck."""

    __slots__ = (
        "__weakref__", "active", "expired", "fd", "loop", "seen", "ticker", "unread", "waited",
        "waiter",
    )  # fmt: skip

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self.loop = loop
        self.fd = fd
        self.waiter: asyncio.Future[None] | None = None
        self.unread = 0  # calls with nobody waiting since the last wait began
        self.seen = False  # the wait in progress was there at the last tick
        self.waited = False  # a wait began since the last tick
        self.expired = False
        self.ticker: asyncio.TimerHandle | None = None
        loop.add_reader(fd, self._readable)
        self.active = True

    def begin(self) -> asyncio.Future[None]:
        """A wait begins: its future."""
        waiter = self.waiter = self.loop.create_future()
        self.unread = 0
        self.seen = False
        self.waited = True
        if self.ticker is None:
            self.ticker = self.loop.call_later(_WAIT_INTERVAL, self._tick)
        return waiter

    def _readable(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(None)
            return
        # Nobody waits. Once is usual: the loop may run a readiness it saw
        # before the wait it woke consumed the data (asyncio's loop does,
        # after every statement). Twice, the data is there and unread.
        self.unread += 1
        if self.unread > 1:
            self.stop()

    def _tick(self) -> None:
        """A wait that was in progress a tick ago still is: woken with
        nothing ready, as psycopg's interval wakes its own, and the socket
        unregistered (its next wait registers it again). What this heals: a
        registration the loop dropped without calling back (uvloop closes
        its poll handle on a socket error, POLLERR). The ticks stop when no
        wait began between two of them."""
        self.ticker = None
        waiter = self.waiter
        if waiter is not None and self.seen:
            self.expired = True
            self.stop()
            if not waiter.done():
                waiter.set_result(None)
            return
        self.seen = waiter is not None
        if self.seen or self.waited:
            self.waited = False
            self.ticker = self.loop.call_later(_WAIT_INTERVAL, self._tick)

    def stop(self) -> None:
        if self.ticker is not None:
            self.ticker.cancel()
            self.ticker = None
        if self.active:
            self.active = False
            if not self.loop.is_closed():
                self.loop.remove_reader(self.fd)


class WatchedConnection(psycopg.AsyncConnection[Any]):
    """An ``AsyncConnection`` that keeps its socket registered with the
    event loop between statements (the module's docstring)."""

    _watch: _Watch | None = None
    _unwatch_on_gc: weakref.finalize[[], WatchedConnection] | None = None
    _vakit_prepared: frozenset[bytes] = (
        frozenset()
    )  # Statement names prepared here (psycopg has _prepared)

    async def run(self, statement: Statement, params: Sequence[bytes | None]) -> None:
        """``statement`` with ``params`` (each in its statement's format,
        ``None`` for NULL), for a statement that returns no rows; its error
        raised as psycopg raises it.

        The single create's path, on libpq's calls and psycopg's C
        generators alone: a cursor, the conversion of named placeholders,
        the adaptation of each value and the prepared-statement bookkeeping
        (psycopg's ``execute``) were a fifth of a single create's API CPU.
        The caller encodes the values; the statement is prepared on this
        connection the first time it runs here, and again when the session
        has lost it (psycopg deallocates every prepared statement after a
        ROLLBACK when it has prepared some of its own)."""
        if self.pgconn.status != ConnStatus.OK:
            raise e.OperationalError("the connection is closed")
        name = statement.name
        if name not in self._vakit_prepared:
            await self._prepare(statement)
        self.pgconn.send_query_prepared(name, params, statement.formats)
        try:
            self._check(await self.wait(generators.execute(self.pgconn)))
        except e.Error as exc:
            if exc.sqlstate != _NOT_PREPARED:
                raise
            # Nothing ran: prepared again, and run once more.
            await self._prepare(statement)
            self.pgconn.send_query_prepared(name, params, statement.formats)
            self._check(await self.wait(generators.execute(self.pgconn)))

    async def _prepare(self, statement: Statement) -> None:
        self._vakit_prepared = self._vakit_prepared - {statement.name}
        self.pgconn.send_prepare(statement.name, statement.sql)
        try:
            self._check(await self.wait(generators.execute(self.pgconn)))
        except e.DuplicatePreparedStatement:
            pass  # prepared by a try whose answer never reached us
        self._vakit_prepared = self._vakit_prepared | {statement.name}

    def _check(self, results: Sequence[Any]) -> None:
        for result in results:
            if result.status == ExecStatus.FATAL_ERROR:
                raise e.error_from_result(result, encoding=self.pgconn._encoding)

    async def wait(
        self, gen: PQGen[RV], interval: float = _WAIT_INTERVAL, timeout: float | None = None
    ) -> RV:
        if timeout is not None:
            self._unwatch()
            return await super().wait(gen, interval, timeout)
        try:
            state = next(gen)
            while state == WAIT_R:
                try:
                    ready = await self._readable()
                except _INTERRUPTED as exc:
                    self._unwatch()
                    rest = cast("PQGen[RV]", _Interrupted(gen, state, exc))
                    return await super().wait(rest, interval)
                state = gen.send(ready)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except OSError as exc:  # as psycopg's wait: the socket is gone
            self._unwatch()
            raise e.OperationalError("connection socket closed") from exc
        except BaseException:
            self._unwatch()  # libpq may have closed the socket
            raise
        # A wait to write, or to read and write: psycopg's, from here.
        self._unwatch()
        return await super().wait(cast("PQGen[RV]", _Resumed(gen, state)), interval)

    async def _readable(self) -> Ready:
        """Until the socket is readable (``READY_R``), or a wait of one to
        two intervals ended with nothing ready (``READY_NONE``)."""
        fd = self.pgconn.socket
        loop = asyncio.get_running_loop()
        watch = self._watch
        if watch is None or not watch.active or watch.fd != fd or watch.loop is not loop:
            self._unwatch()
            watch = self._watch = _Watch(loop, fd)
            # A connection dropped without close() (its finalizer closes the
            # socket): unregistered first.
            self._unwatch_on_gc = weakref.finalize(self, watch.stop)
            self._unwatch_on_gc.atexit = False
        try:
            await watch.begin()
        finally:
            watch.waiter = None
        return READY_NONE if watch.expired else READY_R

    def _unwatch(self) -> None:
        if self._unwatch_on_gc is not None:
            self._unwatch_on_gc()  # stops the watch, once
            self._unwatch_on_gc = None
        self._watch = None

    async def close(self) -> None:
        self._unwatch()
        await super().close()


class _Resumed:
    """``gen``, which already asked to wait for ``state``, for psycopg's own
    wait: asked first, it says ``state`` again; then it is ``gen``."""

    def __init__(self, gen: PQGen[Any], state: Any) -> None:
        self._gen = gen
        self._state: Any = state

    def __iter__(self) -> _Resumed:
        return self

    def __next__(self) -> Any:
        state, self._state = self._state, None
        if state is None:
            return next(self._gen)
        return state

    def send(self, ready: Any) -> Any:
        return self._gen.send(ready)


class _Interrupted(_Resumed):
    """As :class:`_Resumed`, but first raises the interruption, for
    psycopg's wait to handle as its own (it cancels the query on the
    server and reads the generator to its end)."""

    def __init__(self, gen: PQGen[Any], state: Any, exc: BaseException) -> None:
        super().__init__(gen, state)
        self._exc: BaseException | None = exc

    def __next__(self) -> Any:
        exc, self._exc = self._exc, None
        if exc is not None:
            raise exc
        return super().__next__()
