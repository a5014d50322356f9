"""The Kafka target against a real broker (Tansu, in memory, on loopback).

Records are read back with ``assign()`` from the start of every partition, so
"delivered once each" is checked against everything in the topic, not against
what a consumer group happened to see. Deadlines asserted here are the
contract (a firing reports within its timeout), never speed goals.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from cluster.local.childproc import find_free_port
from cluster.local.kafkaserver import (
    TansuBroker,
    TansuError,
    TansuNotFound,
    find_tansu,
    tansu_available,
)
from cluster.model import ClaimedJob
from cluster.targets import FireResult, idempotency_key
from cluster.targets.kafka import KafkaTarget, classify
from cluster.targets.scope import TargetScope
from cluster.targets.signing import Signer
from tests.helpers import claimed_job, webhook_signatures_valid
from tests.kafkafixtures import (  # noqa: F401  (fixtures, used by name)
    TOPIC_PARTITIONS,
    kafka_broker,
    kafka_broker_factory,
    kafka_topic,
    read_topic,
)

pytestmark = pytest.mark.integration

SLACK = 2.0  # a loaded test machine; not a speed goal
NEW = "whsec_" + base64.b64encode(b"new secret of the orders team!!!").decode()
OLD = "whsec_" + base64.b64encode(b"old secret of the orders team!!!").decode()
OTHER = "whsec_" + base64.b64encode(b"the billing team's secret, 32 B").decode()


def claimed(
    topic: str,
    *,
    key: str | None = None,
    attempt: int = 1,
    payload: Any = None,
    scheduled_for: datetime | None = None,
    owner: str | None = None,
) -> ClaimedJob:
    # A non-UTC offset would be refused at the API; the store hands out UTC.
    when = scheduled_for or datetime(2031, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)
    target: dict[str, Any] = {"kind": "KAFKA", "topic": topic}
    if key is not None:
        target["key"] = key
    return claimed_job(
        target,
        attempt=attempt,
        type="test.kafka",
        payload_json=json.dumps(payload),
        scheduled_for=when,
        owner=owner,
    )


async def test_records_carry_the_http_body_key_and_headers(
    kafka_broker: TansuBroker,  # noqa: F811
    kafka_topic: str,  # noqa: F811
) -> None:
    base = datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)
    jobs = [
        claimed(
            kafka_topic,
            key="customer-7" if i % 3 == 0 else None,
            attempt=1 + i % 4,
            payload=[None, {"n": i, "text": "çağrı ✓"}, [1, 2.5, "x"], "plain"][i % 4],  # noqa: RUF001 (Turkish on purpose: non-ASCII must survive)
            scheduled_for=base + timedelta(seconds=i),
            owner="orders",
        )
        for i in range(24)
    ]
    # A rotation in progress: both secrets sign.
    target = KafkaTarget(kafka_broker.bootstrap, signer=Signer({"orders": [NEW, OLD]}))
    sent_after = int(time.time())
    try:
        results = [await target.fire(job, str(job.id), 10.0) for job in jobs]
    finally:
        await target.close()
    assert results == [FireResult.success()] * len(jobs)

    records = read_topic(kafka_broker.bootstrap, kafka_topic)
    assert len(records) == len(jobs)
    by_id = {r.header("Vakit-Job-Id"): r for r in records}
    assert len(by_id) == len(jobs)
    for job in jobs:
        job_id = str(job.id)
        record = by_id[job_id]
        assert record.json() == {
            "jobId": job_id,
            "type": "test.kafka",
            "scheduledFor": job.scheduled_for.isoformat().replace("+00:00", "Z"),
            "attempt": job.attempt,
            "payload": json.loads(job.payload_json),
        }
        assert record.key == (job.target.get("key") or job_id).encode()
        signature = record.headers.pop("webhook-signature").decode()
        timestamp = record.headers.pop("webhook-timestamp").decode()
        assert record.headers == {
            "Content-Type": b"application/json",
            "Idempotency-Key": idempotency_key(job, job_id).encode(),
            "Vakit-Job-Id": job_id.encode(),
            "Vakit-Scheduled-For": job.scheduled_for.isoformat().replace("+00:00", "Z").encode(),
            "Vakit-Attempt": str(job.attempt).encode(),
            "Vakit-Owner": b"orders",
            "webhook-id": idempotency_key(job, job_id).encode(),
        }
        assert sent_after <= int(timestamp) <= time.time()
        # The signature covers the record's value, as it is on the topic,
        # under either secret; not under another owner's.
        msg_id = idempotency_key(job, job_id)
        assert len(signature.split()) == 2
        for secret in (NEW, OLD):
            assert webhook_signatures_valid(secret, msg_id, timestamp, record.value, signature)
        assert not webhook_signatures_valid(OTHER, msg_id, timestamp, record.value, signature)
    # A target key keeps its firings in one partition, hence in order.
    keyed = [r for r in records if r.key == b"customer-7"]
    assert len(keyed) == 8 and len({r.partition for r in keyed}) == 1
    assert [r.json()["scheduledFor"] for r in keyed] == sorted(
        r.json()["scheduledFor"] for r in keyed
    )


async def test_many_firings_at_once_share_one_producer_and_land_once_each(
    kafka_broker: TansuBroker,  # noqa: F811
    kafka_topic: str,  # noqa: F811
) -> None:
    n = 500
    jobs = [claimed(kafka_topic, payload={"i": i}) for i in range(n)]
    target = KafkaTarget(kafka_broker.bootstrap)
    try:
        results = await asyncio.gather(*(target.fire(job, str(job.id), 15.0) for job in jobs))
        lanes = {id(target._lane)}
    finally:
        await target.close()
    assert Counter(results) == {FireResult.success(): n}
    assert len(lanes) == 1

    records = read_topic(kafka_broker.bootstrap, kafka_topic)
    seen = Counter(r.header("Vakit-Job-Id") for r in records)
    assert seen == Counter(str(job.id) for job in jobs)  # each exactly once
    assert {r.json()["payload"]["i"] for r in records} == set(range(n))
    # Job ids as keys spread the firings over the partitions.
    assert len({r.partition for r in records}) == TOPIC_PARTITIONS


async def test_a_missing_topic_is_created_on_first_use(
    kafka_broker: TansuBroker,  # noqa: F811
) -> None:
    topic = f"auto-{uuid.uuid4().hex[:12]}"
    job = claimed(topic)
    target = KafkaTarget(kafka_broker.bootstrap)
    try:
        assert await target.fire(job, str(job.id), 10.0) == FireResult.success()
    finally:
        await target.close()
    [record] = read_topic(kafka_broker.bootstrap, topic)
    assert record.header("Vakit-Job-Id") == str(job.id)


async def test_an_unreachable_broker_is_retried_within_the_timeout() -> None:
    # Nobody listens there: the record waits in the producer's queue.
    target = KafkaTarget(f"127.0.0.1:{find_free_port()}", flush_timeout=0.5)
    jobs = [claimed("orders") for _ in range(20)]
    try:
        started = time.monotonic()
        results = await asyncio.gather(*(target.fire(job, str(job.id), 1.0) for job in jobs))
        elapsed = time.monotonic() - started
    finally:
        closing = time.monotonic()
        await target.close()
        close_took = time.monotonic() - closing
    for result in results:
        assert not result.ok and result.retryable
        assert result.error is not None and "timed out after 1 s" in result.error
    assert elapsed < 1.0 + SLACK
    assert close_took < 0.5 + SLACK  # undelivered records are purged, not waited on


async def test_a_stopped_broker_is_retried_and_a_restarted_one_serves_again(
    kafka_broker_factory: Callable[..., TansuBroker],  # noqa: F811
) -> None:
    broker = kafka_broker_factory()
    target = KafkaTarget(broker.bootstrap, flush_timeout=0.5)
    try:
        first = claimed("orders")
        assert await target.fire(first, str(first.id), 10.0) == FireResult.success()

        broker.stop()
        started = time.monotonic()
        down = await asyncio.gather(
            *(target.fire(job, str(job.id), 1.5) for job in [claimed("orders") for _ in range(10)])
        )
        assert time.monotonic() - started < 1.5 + SLACK
        assert all(not r.ok and r.retryable and r.error for r in down), down

        # Same port, new (empty) broker: the producer reconnects on its own.
        broker.start()
        result = await _fire_until_success(target, "orders", within=20.0)
        assert result == FireResult.success()
    finally:
        await target.close()


async def test_a_producer_with_a_fatal_error_is_replaced(
    kafka_broker: TansuBroker,  # noqa: F811
    kafka_topic: str,  # noqa: F811
) -> None:
    """Only an idempotent (or transactional) producer can fail fatally, and no
    broker we can run makes it do so on demand: set what ``error_cb`` records."""
    target = KafkaTarget(kafka_broker.bootstrap, flush_timeout=0.5)
    try:
        first = claimed(kafka_topic)
        assert await target.fire(first, str(first.id), 10.0) == FireResult.success()
        old = target._lane
        assert old is not None
        old.fatal = KafkaError(KafkaError._FATAL, "test: fatal error", fatal=True)
        second = claimed(kafka_topic)
        assert await target.fire(second, str(second.id), 10.0) == FireResult.success()
        assert target._lane is not old
    finally:
        await target.close()
    records = read_topic(kafka_broker.bootstrap, kafka_topic)
    assert sorted(r.header("Vakit-Job-Id") for r in records) == sorted(
        [str(first.id), str(second.id)]
    )


async def _fire_until_success(target: KafkaTarget, topic: str, within: float) -> FireResult:
    deadline = time.monotonic() + within
    errors: list[str | None] = []
    while time.monotonic() < deadline:
        job = claimed(topic)
        result = await target.fire(job, str(job.id), 3.0)
        if result.ok:
            return result
        assert result.retryable, result
        errors.append(result.error)
        await asyncio.sleep(0.2)
    raise AssertionError(f"no success within {within:.0f} s; errors: {errors}")


async def test_a_record_the_broker_would_never_take_fails_at_once(
    kafka_broker: TansuBroker,  # noqa: F811
    kafka_topic: str,  # noqa: F811
) -> None:
    config: dict[str, Any] = {"message.max.bytes": 10_000}
    target = KafkaTarget(kafka_broker.bootstrap, **config)
    try:
        big = claimed(kafka_topic, payload="x" * 20_000)
        result = await target.fire(big, str(big.id), 5.0)
        assert not result.ok and not result.retryable
        assert result.error is not None and "MSG_SIZE_TOO_LARGE" in result.error

        no_topic = claimed(kafka_topic)
        no_topic.target.pop("topic")
        result = await target.fire(no_topic, str(no_topic.id), 5.0)
        assert result == FireResult.permanent("KAFKA target has no topic")
    finally:
        await target.close()


@pytest.mark.parametrize(
    ("code", "retryable"),
    [
        (KafkaError._MSG_TIMED_OUT, True),
        (KafkaError._TRANSPORT, True),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, True),
        (KafkaError.NOT_LEADER_FOR_PARTITION, True),
        (KafkaError.UNKNOWN_PRODUCER_ID, True),
        (KafkaError._PURGE_QUEUE, True),
        (KafkaError.MSG_SIZE_TOO_LARGE, False),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
        (KafkaError.INVALID_RECORD, False),
    ],
)
def test_classify(code: int, retryable: bool) -> None:
    result = classify(KafkaError(code))
    assert not result.ok and result.retryable is retryable
    assert result.error is not None and result.error.startswith(KafkaError(code).name())


def test_a_broker_that_cannot_bind_its_port_fails_to_start_with_its_log(
    tmp_path: Path,
) -> None:
    if not tansu_available():
        pytest.skip("needs a Tansu broker binary")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = TansuBroker(tmp_path, port=taken.getsockname()[1])
        with pytest.raises(TansuError, match="AddrInUse"):
            broker.start(timeout=10.0)
    assert not broker.running()


def test_a_bad_binary_override_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VAKIT_TANSU_BIN", str(tmp_path / "no-such-tansu"))
    with pytest.raises(TansuNotFound, match="VAKIT_TANSU_BIN"):
        find_tansu()
    assert not tansu_available()


async def test_topics_outside_the_owners_prefixes_and_reserved_ones_are_never_produced(
    kafka_broker: TansuBroker,  # noqa: F811
    kafka_topic: str,  # noqa: F811
) -> None:
    # "orders" may produce to topics starting with its prefix only; the
    # test's topic starts with "t-", which only "audit" is granted.
    scope = TargetScope({"orders": ["kafka:orders."], "audit": ["kafka:t-"]})
    target = KafkaTarget(kafka_broker.bootstrap, scope=scope)
    try:
        refused = [
            claimed(kafka_topic, owner="orders"),
            claimed("__consumer_offsets", owner="audit"),
            claimed("_schemas", owner="nobody-granted"),
            claimed("..", owner="nobody-granted"),
        ]
        for job in refused:
            result = await target.fire(job, str(job.id), 5.0)
            assert not result.ok and not result.retryable, result
        assert read_topic(kafka_broker.bootstrap, kafka_topic) == []
        granted = claimed(kafka_topic, owner="audit")
        assert (await target.fire(granted, str(granted.id), 10.0)).ok
    finally:
        await target.close()
    [record] = read_topic(kafka_broker.bootstrap, kafka_topic)
    assert record.header("Vakit-Owner") == "audit"
