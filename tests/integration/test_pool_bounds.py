"""Every shard pool's connections carry the server-side bounds and the TCP
keepalives (issue 11: with one shard's server stopped, requests hung 25 s).

The partition fault test (tests/faults/test_link_faults.py) shows the
client's own deadline; a pool without ``statement_timeout`` and
``idle_in_transaction_session_timeout`` passed it too. Here the server itself
reports the bounds, and a statement past its timeout is cancelled by the
server: the shard is unavailable (a 503), not waited on until the client's
deadline severs the connection.
"""

from __future__ import annotations

import os
import socket

import psycopg
import pytest

from cluster.errors import ShardUnavailable
from cluster.store.pgshards import PgShards

pytestmark = pytest.mark.integration


def _causes(exc: BaseException | None) -> list[BaseException]:
    out = []
    while exc is not None:
        out.append(exc)
        exc = exc.__cause__
    return out


async def test_every_pooled_connection_carries_the_timeouts_and_keepalives(
    shard_dsns: list[str],
) -> None:
    # The client's deadline (statement timeout + 20 s) is far off: only the
    # server's own statement_timeout can end the sleep below first.
    shards = PgShards(
        shard_dsns,
        max_size=2,
        timeout=20.0,
        statement_timeout=0.5,
        idle_in_transaction_timeout=1.5,
        keepalive_seconds=6,
    )
    await shards.open()
    try:
        for shard in range(len(shard_dsns)):
            async with shards.connection(shard) as conn:
                cur = await conn.execute(
                    "SELECT current_setting('statement_timeout'),"
                    " current_setting('idle_in_transaction_session_timeout')"
                )
                assert await cur.fetchone() == ("500ms", "1500ms")
                params = conn.info.get_parameters()
                assert params.get("keepalives", "1") == "1"
                assert params["keepalives_idle"] == "6"
                assert params["keepalives_count"] == "3"
                assert int(params["tcp_user_timeout"]) > 0
            with pytest.raises(ShardUnavailable) as caught:
                async with shards.connection(shard) as conn:
                    await conn.execute("SELECT pg_sleep(15)")
            causes = _causes(caught.value)
            assert any(isinstance(c, psycopg.errors.QueryCanceled) for c in causes), causes
    finally:
        await shards.close()


def _socket_options(fd: int) -> tuple[int, int, int, int, int]:
    """What the kernel holds for the socket ``fd``: SO_KEEPALIVE, TCP_KEEPIDLE,
    TCP_KEEPINTVL, TCP_KEEPCNT, TCP_USER_TIMEOUT (a duplicate descriptor;
    libpq keeps its own)."""
    with socket.socket(fileno=os.dup(fd)) as dup:
        return (
            dup.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            dup.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            dup.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            dup.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            dup.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        )


async def test_the_keepalives_reach_the_kernel_on_pooled_and_listening_connections(
    shard_dsns: list[str],
) -> None:
    # The DSN's parameters are only a request: this reads the sockets libpq
    # made. Idle 9 s, probes every 3 s, 3 of them: a silent link is noticed
    # after 18 s; data sent and never acknowledged after as long
    # (tcp_user_timeout, which keepalives do not cover).
    shards = PgShards(shard_dsns, min_size=0, max_size=1, keepalive_seconds=9)
    await shards.open()
    expected = (1, 9, 3, 3, 18_000)
    try:
        async with shards.connection(0) as conn:
            assert _socket_options(conn.pgconn.socket) == expected
        listening = shards.listen(1, "vakit_keepalive_probe")
        await anext(listening)
        try:
            # LISTEN's own connection (outside the pool), by its client port.
            with psycopg.connect(shard_dsns[1], autocommit=True) as admin:
                row = admin.execute(
                    "SELECT client_port FROM pg_stat_activity"
                    " WHERE query LIKE 'LISTEN%vakit_keepalive_probe%'"
                ).fetchone()
            assert row is not None
            fds = [int(fd) for fd in os.listdir(f"/proc/{os.getpid()}/fd")]
            found = [_socket_options(fd) for fd in fds if _local_port(fd) == row[0]]
            assert found == [expected], found
        finally:
            await listening.aclose()
    finally:
        await shards.close()


def _local_port(fd: int) -> int | None:
    try:
        with socket.socket(fileno=os.dup(fd)) as dup:
            if dup.family not in (socket.AF_INET, socket.AF_INET6):
                return None
            return int(dup.getsockname()[1])
    except OSError:
        return None
