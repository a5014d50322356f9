"""Calendars on real shards (issue 45): edits re-plan the crons' occurrences,
and a shard added to the cluster gets a copy of every calendar.

The scenario and audit of tests/unit/test_calendar_replan.py, over two
PostgreSQL shards: the API on PgStore and PgCronStore, the materializer on
the same shards, a FakeClock in January 2027 (the writes pin their times to
it, as the materializer's tests do). The audit: no slot has two
occurrences, every slot the final calendar keeps has a live one, and no
live occurrence runs on a holiday.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest

from cluster.api.app import create_app
from cluster.clock import FakeClock
from cluster.cron.calendar_rules import calendar_body
from cluster.model import CalendarRecord
from cluster.store.calendar_copy import copy_calendars
from cluster.store.postgres import PgStore
from cluster.store.postgres_cron import PgCronStore
from tests.unit.test_api_fast import serve, settings
from tests.unit.test_calendar_replan import edit_and_audit
from tests.unit.test_cron_calendars import plan_ahead_of_earlier_runs

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_edits_re_plan_occurrences_on_real_shards(shard_dsns: list[str]) -> None:
    clock = FakeClock(datetime(2026, 12, 31, 12, tzinfo=UTC))
    store = PgStore(shard_dsns, max_size=4, timeout=5.0)
    crons = PgCronStore(store)
    app = create_app(settings(shards=shard_dsns), store=store, crons=crons, clock=clock)
    clients: AsyncIterator[httpx.AsyncClient] = serve(app)
    async for client in clients:
        await edit_and_audit(client, crons, clock)


async def test_a_shard_added_to_the_cluster_gets_every_calendar(shard_dsns: list[str]) -> None:
    # `vakit shards add` copies the calendars (cluster/resharding/grow.py):
    # the greatest version of each, tombstones included, and never a step back.
    body = calendar_body(time_zone="Europe/Istanbul", exclude_dates=["2027-01-01"])
    store = PgStore(shard_dsns, max_size=2, timeout=5.0)
    await store.open()
    try:
        crons = PgCronStore(store)
        newer = dataclasses.replace(body, description="v2")
        await crons.put_calendar(0, CalendarRecord("svc", "a", 2, newer))
        await crons.put_calendar(0, CalendarRecord("svc", "b", 2, body, deleted=True))
        await crons.put_calendar(1, CalendarRecord("svc", "a", 1, body))
        await crons.put_calendar(1, CalendarRecord("svc", "c", 3, body))
        for _ in range(2):  # a second run changes nothing
            assert await asyncio.to_thread(copy_calendars, shard_dsns[:1], shard_dsns[1]) == 2
            a = await crons.get_calendar(1, "svc", "a")
            b = await crons.get_calendar(1, "svc", "b")
            c = await crons.get_calendar(1, "svc", "c")
            assert a is not None and a.version == 2 and a.body == newer
            assert b is not None and b.deleted and b.version == 2
            assert c is not None and c.version == 3
    finally:
        await store.close()


async def test_previous_business_day_is_planned_in_time_on_real_shards(
    shard_dsns: list[str],
) -> None:
    # Migration 25 on PostgreSQL: the due query's second branch finds the
    # unsettled PREVIOUS_BUSINESS_DAY cron weeks ahead, and the write keeps
    # settled_next, so Monday's moved slot exists before its Friday run.
    clock = FakeClock(datetime(2027, 3, 3, 12, tzinfo=UTC))
    store = PgStore(shard_dsns, max_size=4, timeout=5.0)
    crons = PgCronStore(store)
    app = create_app(settings(shards=shard_dsns), store=store, crons=crons, clock=clock)
    async for client in serve(app):
        await plan_ahead_of_earlier_runs(client, crons, clock)
