"""PostgreSQL shards: one connection pool per shard, named statements, and
the translation of driver errors, once, at the store boundary.

:func:`translate_errors` (and :func:`wrap_exceptions` on every public
method) turn psycopg's errors into the project's own: a shard that cannot be
reached becomes :class:`ShardUnavailable` (the API answers 503, the worker
backs off), a unique violation a :class:`Conflict` naming its constraint,
anything else a :class:`StoreError` with the shard and the SQLSTATE. The job
store (:mod:`.postgres`) and the cron store (:mod:`.postgres_cron`) both
stand on :class:`PgShards`.

**Bounded waits.** Every connection carries PostgreSQL's
``statement_timeout`` and ``idle_in_transaction_session_timeout`` and TCP
keepalives (with ``tcp_user_timeout``), so a statement cannot run forever and
a link that dies silently is noticed by the kernel. A shard whose link is cut
while the sockets stay open (a partition behind a proxy, a SIGSTOPped
server) answers nothing at all, and only the client can end the wait: a
checkout is given ``statement_timeout`` plus ``connect_timeout`` in all (the
pool's wait and the idle check included), or less when its caller bound its
calls (:mod:`cluster.store.deadline`: the API's ``api_shard_timeout``), and
past it its connection is severed (:class:`_Watchdog`), which fails the
request as :class:`ShardUnavailable` at once and leaves the pool to discard
that connection. The other shards' pools are untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar, cast

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import AsyncRowFactory, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from cluster import metrics, tracing
from cluster.errors import Conflict, ShardUnavailable, SlotMoving, StoreError, VakitError
from cluster.store import deadline
from cluster.store.migrate import LATEST_VERSION
from cluster.store.sql import QUERIES
from cluster.store.watched import WatchedConnection

__all__ = ["PgShards", "translate_errors", "wrap_exceptions"]

# A connection back from use this recently is not checked again before reuse.
_FRESH_SECONDS = 2.0

# vakit_db_pool_connections' states, from psycopg_pool's statistics.
_POOL_STATS = {"size": "pool_size", "idle": "pool_available", "waiting": "requests_waiting"}

R = TypeVar("R")
M = TypeVar("M", bound=Callable[..., Coroutine[Any, Any, Any]])


# Errors that mean "the shard cannot serve us right now", as opposed to a bug:
# connection failures and shutdowns, a pool with no connection to give, and a
# shard that refuses writes (a standby after failover, a read-only database).
_UNAVAILABLE = (psycopg.OperationalError, PoolTimeout, psycopg.errors.ReadOnlySqlTransaction)
# SQLSTATE classes of the same kind: connection exception, insufficient
# resources, operator intervention (shutdown, cancel, cannot connect now).
_UNAVAILABLE_CLASSES = ("08", "53", "57")

# Raised by vakit_slot_refused (migration 21), the slot in its DETAIL: a
# write the API asked for met the slot fence.
SLOT_REFUSED = "VKS01"


def _unavailable(exc: BaseException) -> bool:
    if isinstance(exc, _UNAVAILABLE):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return isinstance(exc, psycopg.Error) and state[:2] in _UNAVAILABLE_CLASSES


def translated(exc: BaseException, shard: int) -> BaseException:
    """The project's own error for ``exc`` (its cause set), or ``exc`` itself
    when it is not psycopg's (every psycopg error gets one of ours).

    Unavailable → :class:`ShardUnavailable`; the slot fence →
    :class:`SlotMoving`; a unique violation →
    :class:`Conflict` with ``constraint``; any other psycopg error →
    :class:`StoreError` with ``sqlstate``. Our own errors pass untouched, so
    nesting (a method over :meth:`PgStore.connection`) translates once."""
    if not isinstance(exc, psycopg.Error) or isinstance(exc, VakitError):
        return exc
    out: VakitError
    if exc.sqlstate == SLOT_REFUSED:
        out = SlotMoving(shard, int(exc.diag.message_detail or -1))
    elif isinstance(exc, psycopg.errors.UniqueViolation):
        constraint = exc.diag.constraint_name
        out = Conflict(
            f"unique constraint {constraint} refused the write",
            constraint=constraint,
            shard=shard,
            sqlstate=exc.sqlstate,
        )
    elif _unavailable(exc):  # PoolTimeout is a psycopg error too
        out = ShardUnavailable(f"shard {shard} is unavailable: {type(exc).__name__}", shard=shard)
    else:
        out = StoreError(
            f"shard {shard}: {type(exc).__name__}: {exc}".strip(),
            shard=shard,
            sqlstate=exc.sqlstate,
        )
    out.__cause__ = exc
    return out


@contextmanager
def translate_errors(shard: int) -> Iterator[None]:
    """:func:`translated` for any error raised inside. Works around
    ``await``s: a plain ``with`` in a coroutine."""
    try:
        yield
    except psycopg.Error as exc:
        raise translated(exc, shard) from exc


class _Watchdog:
    """Severs a connection that has not answered by a deadline.

    Cancelling the awaiting task would not do: psycopg then sends a cancel
    request over a new connection and waits for the server to end the query,
    up to 10 s more on a link that answers nothing. Shutting the socket down
    (through a duplicate of its descriptor, which psycopg keeps owning) makes
    the pending read fail at once with a closed connection, which the pool
    then discards."""

    def __init__(
        self, conn: psycopg.AsyncConnection[Any], seconds: float, shown: float | None = None
    ) -> None:
        # What the error says the caller was given (the checkout's whole bound).
        self.seconds = seconds if shown is None else shown
        self.fired = False
        self._conn = conn
        self._handle = asyncio.get_running_loop().call_later(seconds, self._sever)

    def _sever(self) -> None:
        self.fired = True
        with contextlib.suppress(Exception):
            fd = self._conn.pgconn.socket
            with socket.socket(fileno=os.dup(fd)) as dup:
                dup.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._handle.cancel()


class _Checkout:
    """:meth:`PgShards.connection`'s block: the pool's ``getconn`` and
    ``putconn`` around it, with the watchdog, the stamp that spares the
    next checkout its check, and the translation of errors.

    A class, not an ``@asynccontextmanager`` over the pool's own
    ``connection()``: each of those is an async generator (the event loop
    registers every one in a weak set), and the connection's own context
    commits at the end, taking its lock and running a wait, though an
    autocommit connection has nothing to commit. The pool's ``putconn``
    deals with whatever state the block leaves (rolls back a transaction
    left open, discards a connection in the middle of a query or broken).
    """

    __slots__ = ("_conn", "_shard", "_shards", "_watchdog")

    def __init__(self, shards: PgShards, shard: int) -> None:
        self._shards = shards
        self._shard = shard
        self._conn: WatchedConnection | None = None
        self._watchdog: _Watchdog | None = None

    async def __aenter__(self) -> WatchedConnection:
        # One bound for all the block waits on: the pool (a shard that
        # stopped answering has no connection to give, and a new one waits
        # for connect_timeout), the check of an idle connection, and the
        # block's statements. The pool's wait and the check used to come on
        # top of the statements' bound: 20 s on a frozen shard.
        shards, shard = self._shards, self._shard
        started = time.monotonic()
        until = deadline.deadline(shards.request_timeout)
        pool = shards._pools[shard]
        try:
            with deadline.within(until):
                conn = await pool.getconn(max(0.0, min(pool.timeout, until - started)))
        except psycopg.Error as exc:
            raise translated(exc, shard) from exc
        left = until - time.monotonic()
        if left <= 0:
            await pool.putconn(conn)
            raise ShardUnavailable(
                f"shard {shard} did not answer within {until - started:.1f} s", shard=shard
            )
        self._conn = conn
        self._watchdog = _Watchdog(conn, left, until - started)
        return conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn, watchdog, shards, shard = self._conn, self._watchdog, self._shards, self._shard
        assert conn is not None and watchdog is not None
        watchdog.cancel()
        if exc is None:
            shards._returned[conn] = time.monotonic()
        else:
            shards._returned.pop(conn, None)  # checked before its next use, however soon
        try:
            await shards._pools[shard].putconn(conn)
        except psycopg.Error as put_failed:
            if exc is None:
                exc = put_failed
        if exc is None:
            return
        out = translated(exc, shard)
        if isinstance(out, ShardUnavailable):
            message = (
                f"shard {shard} did not answer within {watchdog.seconds:.1f} s"
                if watchdog.fired
                else out.message
            )
            raise ShardUnavailable(message, shard=shard, maybe_written=True) from out
        if out is not exc:
            raise out from exc


def _bounded(
    dsn: str, statement_timeout: float, idle_in_transaction_timeout: float, keepalive: float
) -> str:
    """``dsn`` with the server-side timeouts (appended to any ``options`` it
    has) and TCP keepalives, all in the startup packet: no round trip."""
    params = conninfo_to_dict(dsn)
    ours = (
        f"-c statement_timeout={int(statement_timeout * 1000)} "
        f"-c idle_in_transaction_session_timeout={int(idle_in_transaction_timeout * 1000)} "
        # JIT compiles a plan whose estimated cost is high, and the planner
        # cannot size the CTEs of a statement over arrays: a materializer
        # page (25 ms of work) spent 610 ms compiling, every page.
        # Vakit's statements are all short; compiling them is pure loss.
        "-c jit=off"
    )
    options = f"{params.get('options') or ''} {ours}".strip()
    idle = max(1, int(keepalive))
    interval = max(1, idle // 3)
    return make_conninfo(
        dsn,
        options=options,
        keepalives=1,
        keepalives_idle=idle,
        keepalives_interval=interval,
        keepalives_count=3,
        # Data sent and never acknowledged: keepalives do not cover it.
        tcp_user_timeout=(idle + 3 * interval) * 1000,
    )


def wrap_exceptions(method: M) -> M:
    """:func:`translate_errors` around a store method whose first argument
    after ``self`` is the shard (procrastinate's ``wrap_exceptions``). The
    method keeps its exact signature, so the class still meets its protocol."""

    @functools.wraps(method)
    async def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            with deadline.call_deadline():
                return await method(self, *args, **kwargs)
        except psycopg.Error as exc:  # translate_errors, without its layers
            raise translated(exc, args[0] if args else kwargs["shard"]) from exc

    return cast(M, wrapped)


class PgShards:
    """A pool per shard, named statements with their timing, errors translated."""

    latest_schema_version = LATEST_VERSION

    def __init__(
        self,
        dsns: list[str],
        *,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 5.0,
        statement_timeout: float = 10.0,
        idle_in_transaction_timeout: float = 30.0,
        keepalive_seconds: float = 10.0,
        name: str = "vakit",
    ) -> None:
        if not dsns:
            raise ValueError("at least one shard DSN is needed (VAKIT_SHARDS)")
        self.shard_count = len(dsns)
        self._returned: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._check_timeout = timeout
        # What every connection to a shard is opened with, pooled or not.
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, int(timeout)),
        }
        # A server honouring statement_timeout has answered by then; the
        # rest is for the network.
        self.request_timeout = statement_timeout + timeout
        self._timers: dict[tuple[int, str], Any] = {}
        self._bounds = (statement_timeout, idle_in_transaction_timeout, keepalive_seconds)
        self._sizes = (min_size, max_size, timeout)
        self._name = name
        self._opened = False
        self._dsns: list[str] = []
        self._pools: list[AsyncConnectionPool[WatchedConnection]] = []
        for dsn in dsns:
            self._new_pool(dsn)
        self.shard_count = len(self._pools)

    def _new_pool(self, dsn: str) -> AsyncConnectionPool[WatchedConnection]:
        bounded = _bounded(dsn, *self._bounds)
        pool: AsyncConnectionPool[WatchedConnection] = AsyncConnectionPool(
            bounded,
            min_size=self._sizes[0],
            max_size=self._sizes[1],
            timeout=self._sizes[2],
            open=False,
            name=f"{self._name}-shard{len(self._pools)}",
            # A connection that died with its server (restart, failover)
            # is noticed before use, not by the statement that needs it;
            # only idle ones are checked, a round trip per checkout was
            # a tenth of a worker's CPU in a wave.
            check=self._check_if_idle,
            # No reset hook: with one, the pool hands every returned
            # connection to its maintenance worker (a queue and a task
            # switch per statement); connection() stamps it instead.
            # The background refill gives up after a minute; connections
            # are still made on demand, so a shard that comes back later
            # is used again.
            reconnect_timeout=60,
            # Its socket registered with the event loop once, not per
            # statement: a quarter of a statement's client CPU.
            connection_class=WatchedConnection,
            kwargs=self._connect_kwargs,
        )
        self._dsns.append(bounded)
        self._pools.append(pool)
        return pool

    async def add_shard(self, dsn: str) -> int:
        """Open a pool to a shard added to the running cluster (resharding);
        its number is the next one. The slot map, not this list, decides
        when it serves anything."""
        pool = self._new_pool(dsn)
        shard = len(self._pools) - 1
        if self._opened:
            self._gauge(shard)
            await pool.open(wait=False)
        self.shard_count = len(self._pools)
        return shard

    async def _check_if_idle(self, conn: psycopg.AsyncConnection[Any]) -> None:
        last = self._returned.get(conn)
        if last is not None and time.monotonic() - last < _FRESH_SECONDS:
            return
        # Within the checkout's own bound, when a checkout asks (getconn runs
        # the check in the caller's task).
        watchdog = _Watchdog(
            conn, max(0.0, deadline.deadline(self._check_timeout) - time.monotonic())
        )
        try:
            await AsyncConnectionPool.check_connection(conn)
        finally:
            watchdog.cancel()

    async def open(self) -> None:
        self._opened = True
        for shard in range(self.shard_count):
            self._gauge(shard)
        for pool in self._pools:
            # wait=False: a shard that is down at start must not stop the
            # others from serving; the pool keeps reconnecting.
            await pool.open(wait=False)

    def _gauge(self, shard: int) -> None:
        # The pools' state is read when /metrics is scraped, not written at
        # each statement (a tenth of a statement's own CPU in the API). The
        # process's open store is the one its gauges show.
        this = weakref.ref(self)
        for state, stat in _POOL_STATS.items():
            metrics.DB_POOL.labels(str(shard), state).set_function(
                functools.partial(_pool_stat, this, shard, stat)
            )

    async def close(self) -> None:
        for pool in self._pools:
            await pool.close()

    def connection(self, shard: int) -> _Checkout:
        """A pooled connection to ``shard`` (autocommit), as ``async with``;
        errors raised in the block, by the pool or by a statement, come out
        translated.

        The block has :attr:`request_timeout` seconds; past it the connection
        is severed and the block fails with :class:`ShardUnavailable`. That
        error says ``maybe_written`` when the block had its connection: a
        statement may have reached the shard."""
        if not 0 <= shard < self.shard_count:
            raise ValueError(f"shard {shard} out of range 0..{self.shard_count - 1}")
        return _Checkout(self, shard)

    async def listen(self, shard: int, channel: str) -> AsyncGenerator[None, None]:
        """Yields once when ``shard`` listens on ``channel`` (a notification
        sent before then is not seen), then once per notification; those of
        one transaction come as one.

        On a connection of its own, outside the pool: LISTEN holds its
        session. The keepalives notice a link that dies silently; a broken
        link ends the iteration with :class:`ShardUnavailable`, and the
        caller listens again."""
        if not 0 <= shard < self.shard_count:
            raise ValueError(f"shard {shard} out of range 0..{self.shard_count - 1}")
        with translate_errors(shard):
            conn = await psycopg.AsyncConnection.connect(self._dsns[shard], **self._connect_kwargs)
        try:
            with translate_errors(shard):
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            yield
            # One generator for the connection's life: psycopg may drop a
            # notification that arrives between two notifies() calls.
            with translate_errors(shard):
                async for _ in conn.notifies():
                    yield
            raise ShardUnavailable(f"shard {shard} stopped sending notifications", shard=shard)
        finally:
            await conn.close()

    async def fetch(self, shard: int, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Run the named query ``name`` on ``shard``; rows as dicts."""
        return await self.fetch_as(shard, name, params, dict_row)

    async def fetch_as(
        self, shard: int, name: str, params: dict[str, Any], rows: AsyncRowFactory[R]
    ) -> list[R]:
        """Run the named query ``name`` on ``shard``; rows as ``rows`` makes them."""
        started = time.perf_counter()
        try:
            async with self.connection(shard) as conn, conn.cursor(row_factory=rows) as cur:
                await cur.execute(QUERIES[name], params)
                return await cur.fetchall() if cur.description else []
        finally:
            self._observe(shard, name, time.perf_counter() - started)

    def _observe(self, shard: int, name: str, seconds: float) -> None:
        """The statement's time (children kept: a wave runs a few statements
        per 500 jobs)."""
        if not 0 <= shard < self.shard_count:
            return  # connection() refused it; let its ValueError through
        key = (shard, name)
        child = self._timers.get(key)
        if child is None:
            child = self._timers[key] = metrics.STORE_QUERY_SECONDS.labels(str(shard), name)
        child.observe(seconds)
        if tracing.ENABLED:  # every named statement passes here, whichever path ran it
            tracing.record(
                f"db {name}",
                seconds,
                kind="client",
                attributes={
                    "db.system": "postgresql",
                    "db.operation.name": name,
                    "vakit.shard": shard,
                },
            )

    @wrap_exceptions
    async def schema_version(self, shard: int) -> int:
        rows = await self.fetch(shard, "schema_version", {})
        return int(rows[0]["version"])


def _pool_stat(shards: weakref.ReferenceType[PgShards], shard: int, stat: str) -> float:
    """One of a shard pool's statistics, 0 once its store is gone."""
    store = shards()
    return float(store._pools[shard].get_stats().get(stat, 0)) if store is not None else 0.0
