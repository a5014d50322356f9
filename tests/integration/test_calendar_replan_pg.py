"""A calendar's edits re-plan its crons' occurrences on real shards (issue 45).

The scenario and audit of tests/unit/test_calendar_replan.py, over two
PostgreSQL shards: the API on PgStore and PgCronStore, the materializer on
the same shards, a FakeClock in January 2027 (the writes pin their times to
it, as the materializer's tests do). The audit: no slot has two
occurrences, every slot the final calendar keeps has a live one, and no
live occurrence runs on a holiday.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest

from cluster.api.app import create_app
from cluster.clock import FakeClock
from cluster.store.postgres import PgStore
from cluster.store.postgres_cron import PgCronStore
from tests.unit.test_api_fast import serve, settings
from tests.unit.test_calendar_replan import edit_and_audit

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_edits_re_plan_occurrences_on_real_shards(shard_dsns: list[str]) -> None:
    clock = FakeClock(datetime(2026, 12, 31, 12, tzinfo=UTC))
    store = PgStore(shard_dsns, max_size=4, timeout=5.0)
    crons = PgCronStore(store)
    app = create_app(settings(shards=shard_dsns), store=store, crons=crons, clock=clock)
    clients: AsyncIterator[httpx.AsyncClient] = serve(app)
    async for client in clients:
        await edit_and_audit(client, crons, clock)
