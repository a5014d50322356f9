"""One store, two implementations: every contract test runs on each.

``mem`` is :class:`MemStore` on a fake clock; ``pg`` is :class:`PgStore` on
real PostgreSQL servers (a migrated template cloned per test, see
tests/pgfixtures.py). Both start their clock at the wall clock's now, so the
database's ``now()`` (used where a params object has no ``now``) and the
pinned times the tests pass agree to within the test's run time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from cluster.clock import FakeClock
from cluster.store.base import Store
from cluster.store.memory import MemStore
from cluster.store.postgres import PgStore

SHARDS = 2  # tests/pgfixtures.py starts two servers


@dataclass
class Harness:
    """The store under test and the clock its tests pin times with."""

    store: Store
    clock: FakeClock
    kind: str  # "mem" or "pg"

    def now(self) -> datetime:
        return self.clock.now()


@pytest.fixture(params=["mem", pytest.param("pg", marks=pytest.mark.integration)])
async def h(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    clock = FakeClock(datetime.now(UTC))
    if request.param == "mem":
        yield Harness(MemStore(SHARDS, clock), clock, "mem")
        return
    dsns: list[str] = request.getfixturevalue("shard_dsns")
    store = PgStore(dsns, max_size=4, timeout=3.0)
    await store.open()
    try:
        yield Harness(store, clock, "pg")
    finally:
        await store.close()
