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
