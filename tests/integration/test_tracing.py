"""One trace from the API create to the firing's traceparent at a real receiver.

Tracing is on for this module only (an in-memory exporter); the API runs on
the real PostgreSQL shards, a worker fires at a real HTTP server on loopback,
and the test reads the spans the process recorded and the header the
receiver got.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from aiohttp import web
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cluster import logs, tracing
from cluster.config import Settings
from cluster.coordination.base import StaticCoordinator
from cluster.local.kafkaserver import TansuBroker
from cluster.processes import api_app
from cluster.store.postgres import PgStore
from cluster.targets.http import HttpTarget
from cluster.targets.kafka import KafkaTarget
from cluster.targets.policy import AddressPolicy
from cluster.worker.worker import Worker
from tests.helpers import claimed_job
from tests.kafkafixtures import (  # noqa: F401  (fixtures, used by name)
    kafka_broker,
    kafka_broker_factory,
    kafka_topic,
    read_topic,
)
from tests.openapi_conformance import conformance_hooks

pytestmark = pytest.mark.integration

TOKEN = {"Authorization": "Bearer token-a"}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    assert tracing.setup("vakit-test", span_exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.shutdown()
    assert not tracing.ENABLED


class Receiver:
    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        self.headers.append(dict(request.headers))
        return web.Response(status=200)

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/hook"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


def settings_for(dsns: list[str]) -> Settings:
    return Settings(
        shards=dsns, api_tokens={"token-a": "svc-a"}, allow_private_targets=True,
        poll_interval=0.1, complete_linger=0, prefetch_seconds=0,
    )  # fmt: skip


async def api_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = api_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api", event_hooks=conformance_hooks(app.openapi)
        ) as client:
            yield client


async def test_one_trace_from_create_to_the_receivers_traceparent(
    spans: InMemorySpanExporter, shard_dsns: list[str]
) -> None:
    settings = settings_for(shard_dsns)
    caller_trace = "0af7651916cd43dd8448eb211c80319c"
    async with Receiver() as receiver:
        run_at = (datetime.now(UTC) + timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
        async for api in api_client(settings):
            resp = await api.post(
                "/api/v1/jobs",
                headers={**TOKEN, "traceparent": f"00-{caller_trace}-b7ad6b7169203331-01"},
                json={"type": "T", "runAt": run_at, "target": {"kind": "HTTP", "url": receiver.url},
                      "payload": {}, "maxAttempts": 1, "timeoutSeconds": 10},
            )  # fmt: skip
            assert resp.status_code == 201, resp.text
            job_id = resp.json()["jobId"]
            shown = (await api.get(f"/api/v1/jobs/{job_id}", headers=TOKEN)).json()
            assert shown["target"] == {"kind": "HTTP", "url": receiver.url}  # the trace is ours

        store = PgStore(shard_dsns, max_size=4, timeout=3.0)
        await store.open()
        http = HttpTarget(AddressPolicy(allow_private=True))
        worker = Worker(settings, store, StaticCoordinator("w1", 2), {"HTTP": http}, worker_id="w1")
        worker.start()
        try:
            for _ in range(200):
                if receiver.headers:
                    break
                await asyncio.sleep(0.05)
        finally:
            await worker.stop()
            await http.close()
            await store.close()

    (headers,) = receiver.headers
    version, trace_id, parent_span, flags = headers["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", caller_trace, "01")
    assert headers["Vakit-Job-Id"] == job_id

    recorded = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in recorded}
    (create,) = [s for s in recorded if s.name == "POST /api/v1/jobs"]
    (fire,) = [s for s in recorded if s.name == "fire HTTP"]
    # The caller's trace, continued by the create, then by the firing, whose
    # own span id is what the receiver was sent.
    assert create.context.trace_id == int(caller_trace, 16)
    assert create.parent is not None and create.parent.span_id == int("b7ad6b7169203331", 16)
    assert fire.context.trace_id == create.context.trace_id
    assert fire.parent is not None and fire.parent.span_id == create.context.span_id
    assert fire.context.span_id == int(parent_span, 16)
    assert fire.attributes is not None and fire.attributes["vakit.job_id"] == job_id
    # The create's statement on its shard is in the same trace, under the create.
    statements = [s for s in recorded if s.name.startswith("db ") and s.parent is not None
                  and s.parent.span_id == create.context.span_id]  # fmt: skip
    assert statements and all(s.context.trace_id == create.context.trace_id for s in statements)
    assert all(s.parent is None or s.parent.span_id in by_id or s is create for s in recorded)


def test_log_lines_carry_the_bound_context_and_the_trace(spans: InMemorySpanExporter) -> None:
    formatter = logs.JsonFormatter("api")
    record = logging.makeLogRecord({"msg": "created", "levelno": logging.INFO, "levelname": "INFO"})
    with logs.bound(request_id="r-1", owner="svc-a"), tracing.span("POST /api/v1/jobs") as span:
        line = json.loads(formatter.format(record))
        expected_trace = f"{span.get_span_context().trace_id:032x}"
    assert line["request_id"] == "r-1" and line["owner"] == "svc-a"
    assert line["trace_id"] == expected_trace
    after = json.loads(formatter.format(record))
    assert "request_id" not in after and "trace_id" not in after


def test_tracing_is_off_without_an_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    assert tracing.setup("vakit-test", "none") is False
    assert not tracing.ENABLED and tracing.current_traceparent() is None
    headers: dict[str, Any] = {}
    tracing.inject(headers, None)
    assert headers == {}
    tracing.inject(headers, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    assert headers["traceparent"].startswith("00-0af7")  # a stored context is passed on


async def test_kafka_records_carry_the_firing_spans_traceparent(
    spans: InMemorySpanExporter,
    kafka_broker: TansuBroker,  # noqa: F811
    kafka_topic: str,  # noqa: F811
) -> None:
    created = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    job = claimed_job({"kind": "KAFKA", "topic": kafka_topic, "traceparent": created})
    target = KafkaTarget(kafka_broker.bootstrap)
    try:
        with tracing.span("fire KAFKA", kind="client", parent=created) as span:
            sent = tracing.current_traceparent()
            assert (await target.fire(job, str(job.id), 10.0)).ok
        tracing.shutdown()  # off: the stored context is passed on as it is
        assert (await target.fire(job, str(job.id) + "-again", 10.0)).ok
    finally:
        await target.close()
    headers = {r.header("Vakit-Job-Id"): r.header("traceparent") for r in read_topic(kafka_broker.bootstrap, kafka_topic)}
    assert sent is not None and sent.split("-")[1] == created.split("-")[1]
    assert sent.split("-")[2] == f"{span.get_span_context().span_id:016x}"
    assert headers == {str(job.id): sent, str(job.id) + "-again": created}
