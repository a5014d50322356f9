"""The shard pools' connection keeps its socket registered with the event
loop (cluster/store/watched.py): statements still get their answers, a
statement that is cancelled or whose link is cut still ends as psycopg's own
wait would end it, and a closed socket is never left registered (a new
connection reusing its descriptor number would wait for ever).

Every test runs on asyncio's own loop and on uvloop (what the API and the
workers run on), against a real PostgreSQL server."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import psycopg
import pytest
import uvloop

from cluster.store import watched
from cluster.store.pgshards import PgShards
from cluster.store.watched import WatchedConnection

pytestmark = pytest.mark.integration

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """Runs a coroutine to its end on a new loop of the parameter's kind."""

    def on_loop(coro: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=LOOPS[request.param]) as runner:
            return runner.run(asyncio.wait_for(coro, 60))

    return on_loop


async def _connect(dsn: str) -> WatchedConnection:
    return await WatchedConnection.connect(dsn, autocommit=True)


async def _reconnect_on(dsn: str, fd: int) -> WatchedConnection:
    """A new connection whose socket has descriptor number ``fd`` (the one a
    closed connection had): what makes a registration left behind hang."""
    held = []
    try:
        for _ in range(20):
            conn = await _connect(dsn)
            if conn.pgconn.socket == fd:
                return conn
            held.append(conn)  # keep its number taken; the next may get fd
        raise AssertionError(f"no new connection got descriptor {fd}")
    finally:
        for conn in held:
            await conn.close()


async def _reused_number_answers(dsn: str, fd: int) -> None:
    """A new connection on the descriptor number ``fd`` answers."""
    async with await _reconnect_on(dsn, fd) as again:
        await _answers(again)


async def _answers(conn: psycopg.AsyncConnection[Any]) -> None:
    """The connection answers a statement (within 5 s: a socket the loop
    does not watch would never be read)."""
    cur = await asyncio.wait_for(conn.execute("SELECT 41 + 1"), 5)
    assert await cur.fetchone() == (42,)


def test_statements_small_and_large_get_their_answers(run: Any, shard_dsns: list[str]) -> None:
    async def body() -> None:
        async with await _connect(shard_dsns[0]) as conn:
            for i in range(200):
                cur = await conn.execute("SELECT %s::int * 2", (i,))
                assert await cur.fetchone() == (i * 2,)
            # An answer of many reads.
            cur = await conn.execute("SELECT g, repeat('x', 100) FROM generate_series(1, 100000) g")
            rows = await cur.fetchall()
            assert len(rows) == 100_000 and rows[-1] == (100_000, "x" * 100)
            # A statement larger than the socket's buffer waits to write:
            # psycopg's own wait serves it, and the next statement is ours again.
            big = "y" * (16 * 1024 * 1024)
            cur = await conn.execute("SELECT length(%s)", (big,))
            assert await cur.fetchone() == (len(big),)
            await _answers(conn)
            # A wait longer than the ticks' interval: woken with nothing
            # ready and registered again, twice or more, and answered.
            cur = await conn.execute("SELECT pg_sleep(0.6), 7")
            assert await cur.fetchone() == ("", 7)
            # A wait with a deadline is psycopg's too.
            async with conn.transaction():
                await conn.execute("SELECT 1")
            await _answers(conn)

    run(body())


def test_a_socket_is_registered_once_for_many_statements(
    run: Any, shard_dsns: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    registered: list[int] = []
    start = watched._Watch.__init__

    def counting(self: watched._Watch, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        registered.append(fd)
        start(self, loop, fd)

    monkeypatch.setattr(watched._Watch, "__init__", counting)

    async def body() -> None:
        async with await _connect(shard_dsns[0]) as conn:
            for _ in range(50):
                await _answers(conn)
            # Idle, the ticker stops.
            await asyncio.sleep(0.5)
            assert conn._watch is not None and conn._watch.ticker is None
            await _answers(conn)

    run(body())
    assert len(registered) == 1


def test_an_idle_connection_the_server_ends_is_unwatched_and_its_number_reused(
    run: Any, shard_dsns: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    readable = watched._Watch._readable

    def counting(self: watched._Watch) -> None:
        nonlocal calls
        calls += 1
        readable(self)

    monkeypatch.setattr(watched._Watch, "_readable", counting)

    async def body() -> None:
        conn = await _connect(shard_dsns[0])
        await _answers(conn)
        calls_before = calls
        async with await psycopg.AsyncConnection.connect(shard_dsns[0], autocommit=True) as other:
            await other.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        # The end of the session is readable while nobody reads: the socket
        # is unwatched after a call or two, not called back at every turn.
        await asyncio.sleep(0.5)
        assert 1 <= calls - calls_before <= 3
        assert conn._watch is not None and not conn._watch.active
        fd = conn.pgconn.socket
        with pytest.raises(psycopg.OperationalError):
            await conn.execute("SELECT 1")
        await conn.close()
        await _reused_number_answers(shard_dsns[0], fd)

    run(body())


def test_a_link_cut_mid_statement_fails_it_and_the_number_is_reused(
    run: Any, shard_dsns: list[str]
) -> None:
    async def body() -> None:
        conn = await _connect(shard_dsns[0])
        fd = conn.pgconn.socket
        loop = asyncio.get_running_loop()

        def cut() -> None:  # as PgShards' watchdog severs a link that answers nothing
            with socket.socket(fileno=os.dup(fd)) as dup:
                dup.shutdown(socket.SHUT_RDWR)

        loop.call_later(0.3, cut)
        with pytest.raises(psycopg.OperationalError):
            await conn.execute("SELECT pg_sleep(30)")
        assert conn.broken
        await conn.close()
        await _reused_number_answers(shard_dsns[0], fd)

    run(body())


def test_a_cancelled_statement_is_cancelled_on_the_server_as_psycopg_does(
    run: Any, shard_dsns: list[str]
) -> None:
    async def body() -> None:
        async with await _connect(shard_dsns[0]) as conn:
            sleeping = asyncio.create_task(conn.execute("SELECT pg_sleep(30)"))
            await asyncio.sleep(0.3)
            sleeping.cancel()
            with pytest.raises(asyncio.CancelledError):
                await sleeping
            # psycopg's wait cancelled the query and read its end: the
            # connection is idle and answers (the sleep would have taken 30 s).
            assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
            await _answers(conn)

    run(body())


def test_a_connection_dropped_without_close_leaves_nothing_registered(
    run: Any, shard_dsns: list[str]
) -> None:
    async def body() -> None:
        conn = await _connect(shard_dsns[0])
        await _answers(conn)
        fd = conn.pgconn.socket
        with pytest.warns(ResourceWarning):
            del conn
            gc.collect()
        await _reused_number_answers(shard_dsns[0], fd)

    run(body())


async def test_the_shard_pools_use_it(shard_dsns: list[str]) -> None:
    shards = PgShards(shard_dsns, max_size=2)
    await shards.open()
    try:
        async with shards.connection(0) as conn:
            assert isinstance(conn, WatchedConnection)
            await _answers(conn)
    finally:
        await shards.close()


# -- run(): a statement on libpq's calls alone (the single create's path) -----

_TABLE = "CREATE TEMP TABLE lean (id int PRIMARY KEY, note text, doc jsonb, at timestamptz)"
_LEAN = watched.Statement("test_lean_insert", "INSERT INTO lean VALUES ($1, $2, $3, $4)")


async def _rows(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
    # The test servers run in a zone other than UTC: the instant is compared.
    cur = await conn.execute(
        "SELECT id, note, doc, at = '2026-12-06 10:00:00+00' FROM lean ORDER BY id"
    )
    return await cur.fetchall()


def test_run_writes_its_values_and_prepares_once_a_session(run: Any, shard_dsns: list[str]) -> None:
    async def body() -> None:
        async with await _connect(shard_dsns[0]) as conn:
            await conn.execute(_TABLE)
            for i in range(3):
                values = [b"%d" % i, "nöte".encode(), b'{"n": %d}' % i, b"2026-12-06T10:00:00+00:00"]
                await conn.run(_LEAN, values)
            await conn.run(_LEAN, [b"9", None, None, None])
            assert await _rows(conn) == [
                (0, "nöte", {"n": 0}, True),
                (1, "nöte", {"n": 1}, True),
                (2, "nöte", {"n": 2}, True),
                (9, None, None, None),
            ]
            cur = await conn.execute(
                "SELECT count(*) FROM pg_prepared_statements WHERE name = %s", [_LEAN.name.decode()]
            )
            assert await cur.fetchone() == (1,)

    run(body())


def test_run_raises_the_servers_error_as_psycopg_does(run: Any, shard_dsns: list[str]) -> None:
    async def body() -> None:
        async with await _connect(shard_dsns[0]) as conn:
            await conn.execute(_TABLE)
            await conn.run(_LEAN, [b"1", None, None, None])
            with pytest.raises(psycopg.errors.UniqueViolation):
                await conn.run(_LEAN, [b"1", None, None, None])
            with pytest.raises(psycopg.errors.InvalidTextRepresentation):
                await conn.run(_LEAN, [b"2", None, b"{not json", None])
            await conn.run(_LEAN, [b"3", None, None, None])  # the session goes on
            assert [r[0] for r in await _rows(conn)] == [1, 3]
        conn = await _connect(shard_dsns[0])
        await conn.close()
        with pytest.raises(psycopg.OperationalError):
            await conn.run(_LEAN, [b"4", None, None, None])

    run(body())


@pytest.mark.parametrize("forget", ["DEALLOCATE ALL", "DISCARD ALL", "psycopg's rollback"])
def test_a_statement_the_session_lost_is_prepared_again_and_runs_once(
    run: Any, shard_dsns: list[str], forget: str
) -> None:
    async def body() -> None:
        async with await _connect(shard_dsns[0]) as conn:
            await conn.execute(_TABLE.replace("TEMP TABLE lean", "TABLE IF NOT EXISTS lean_lost"))
            await conn.execute("TRUNCATE lean_lost")
            lost = watched.Statement("test_lean_lost", "INSERT INTO lean_lost VALUES ($1, $2, $3, $4)")
            await conn.run(lost, [b"1", None, None, None])
            if forget == "psycopg's rollback":
                # psycopg deallocates every prepared statement after a
                # ROLLBACK once it has prepared one of its own.
                conn.prepare_threshold = 0
                await conn.execute("SELECT 1", prepare=True)
                await conn.execute("ROLLBACK")
            else:
                await conn.execute(forget)
            await conn.run(lost, [b"2", None, None, None])
            cur = await conn.execute("SELECT id FROM lean_lost ORDER BY id")
            assert await cur.fetchall() == [(1,), (2,)]
            await conn.execute("DROP TABLE lean_lost")

    run(body())
