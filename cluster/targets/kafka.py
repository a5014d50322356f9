"""The Kafka target: produce the JSON firing to the job's topic.

The record carries the same body as the HTTP target's POST (``firing_body``),
keyed by the target's ``key`` or else the job id (so one job's firings stay in
one partition, in order), with the HTTP target's ``Idempotency-Key``,
``Vakit-*`` and signed ``webhook-*`` values as record headers (the signature
covers the record's value). The owner's topic prefixes and the reserved
topics (:mod:`cluster.targets.scope`) are checked before producing.

A firing succeeds when the broker acknowledges the record (``acks=all``). Local
timeouts, a broker that is down, leader changes and unknown topics are retried
(a topic may be created later); a record the broker will never take as it is
(too large, an invalid topic name, refused by authorization or by schema
validation) fails at once. A firing that timed out on our side may still land
later: delivery stays at least once, and consumers deduplicate on
``Idempotency-Key`` exactly as HTTP receivers do.

All firings of a process share one ``confluent_kafka.Producer``: ``produce()``
only enqueues, a thread serves delivery reports with ``poll()``, and each report
settles its firing's asyncio future through ``call_soon_threadsafe``, so the
event loop never blocks on the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from cluster import tracing
from cluster.instants import format_instant
from cluster.model import ClaimedJob
from cluster.targets import FireResult, firing_body, idempotency_key
from cluster.targets.policy import TargetRefused
from cluster.targets.scope import TargetScope, check_topic_name
from cluster.targets.signing import Signer

__all__ = ["PERMANENT_ERRORS", "KafkaTarget", "classify"]

log = logging.getLogger(__name__)

# Errors that the same record would meet again on every attempt. Anything else
# (timeouts, transport errors, leader elections, unknown topic or partition,
# and codes we have not thought of) is retried: failing a job for good on a
# passing broker condition is the worse mistake.
PERMANENT_ERRORS = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.TOPIC_EXCEPTION,  # an invalid topic name
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        # Schema validation (Tansu, Confluent's broker-side validation) refused it.
        KafkaError.INVALID_RECORD,
    }
)

_DEFAULT_CONFIG: dict[str, Any] = {
    "client.id": "vakit-worker",
    # A firing counts only once every in-sync replica has it.
    "acks": "all",
    # Idempotence is off by default, on purpose. It only keeps the producer's
    # own retries from duplicating or reordering records, and Vakit promises at
    # least once with an Idempotency-Key anyway (a firing that times out here
    # and lands later is retried regardless). What it costs: a broker that
    # forgets producer ids wedges the producer. Tansu (our local broker) keeps
    # them in memory; after a restart it answers UNKNOWN_PRODUCER_ID to every
    # produce, librdkafka bumps the epoch locally and resends, and every record
    # times out, for as long as the producer lives (observed with Tansu 0.6.0
    # and librdkafka 2.16). Against Kafka proper it is safe to opt in with
    # ``**{"enable.idempotence": True}``; a fatal producer error (which only
    # idempotence can raise) then gets the producer replaced, see _producer().
    "enable.idempotence": False,
    # Concurrent firings share batches; 5 ms is little next to a firing's timeout.
    "linger.ms": 5,
    # How long a record may wait for the broker in all, whatever the firing's own
    # timeout. Bounds the local queue and the late duplicates while a broker is
    # down; a firing's result is decided by the shorter of the two.
    "message.timeout.ms": 30_000,
    # A broker back from a restart is found within 2 s, not librdkafka's 10.
    "reconnect.backoff.max.ms": 2_000,
}

_POLL_INTERVAL = 0.1


def classify(err: KafkaError) -> FireResult:
    """The firing's result for a delivery (or produce) error."""
    detail = f"{err.name()}: {err.str()}"
    if err.code() in PERMANENT_ERRORS:
        return FireResult.permanent(detail)
    return FireResult.retry(detail)


class _Lane:
    """One Producer and the thread that serves its callbacks.

    A producer that hit a fatal error (possible with idempotence) is retired:
    its thread keeps serving reports until its queue is empty or the drain time
    is up, then purges what is left, so no firing waits on it forever.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self.fatal: KafkaError | None = None
        self.undelivered = 0  # records purged at the end of the drain
        self.producer = Producer({**config, "error_cb": self._on_error})
        self._stop = threading.Event()
        self._drain_timeout = 0.0
        self._thread = threading.Thread(target=self._run, name="vakit-kafka-poll", daemon=True)
        self._thread.start()

    def _on_error(self, err: KafkaError) -> None:
        # Called from poll(), in our thread. Connection errors repeat while a
        # broker is down; the firings report them, so they stay quiet here.
        if err.fatal():
            self.fatal = err
            log.error("kafka producer failed: %s", err.str(), extra={"kafka_error": err.name()})
        elif err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            log.info("kafka: %s", err.str(), extra={"kafka_error": err.name()})
        else:
            log.warning("kafka: %s", err.str(), extra={"kafka_error": err.name()})

    def _run(self) -> None:
        producer = self.producer
        while not self._stop.is_set():
            producer.poll(_POLL_INTERVAL)
        deadline = time.monotonic() + self._drain_timeout
        while len(producer) > 0 and time.monotonic() < deadline:
            producer.poll(_POLL_INTERVAL)
        self.undelivered = len(producer)
        if self.undelivered:
            # Report what is still queued as failed (purged) instead of
            # leaving its firings to their timeouts.
            producer.purge()
            producer.poll(0)
        # Frees librdkafka's threads and sockets now, not at garbage collection.
        producer.close()

    def retire(self, drain_timeout: float) -> None:
        """Stop taking records; drain in the background."""
        self._drain_timeout = drain_timeout
        self._stop.set()

    def draining(self) -> bool:
        return self._thread.is_alive()

    def close(self, drain_timeout: float) -> int:
        """Flush (up to ``drain_timeout`` s) and stop. Blocks: run in a thread.

        Returns how many records were still undelivered (and then purged).
        """
        if not self._stop.is_set():
            self.retire(drain_timeout)
        self._thread.join()
        return self.undelivered


class KafkaTarget:
    """Fire jobs as records on Kafka topics (``{"kind": "KAFKA", "topic", "key"?}``).

    ``producer_config`` adds to or overrides librdkafka settings, with their
    dotted names: ``KafkaTarget(bootstrap, **{"linger.ms": 0})``.
    ``flush_timeout`` bounds how long :meth:`close` waits for queued records.
    """

    kind = "KAFKA"
    enforces_timeout = True  # the acknowledgement wait is bounded by the job timeout

    def __init__(
        self,
        bootstrap: str,
        *,
        flush_timeout: float = 5.0,
        scope: TargetScope | None = None,
        signer: Signer | None = None,
        **producer_config: Any,
    ) -> None:
        self._scope = scope or TargetScope()
        self._signer = signer or Signer()
        # (owner, topic) -> why it is refused, or None: the grants never change.
        self._checked: dict[tuple[str | None, str], TargetRefused | None] = {}
        self._config: dict[str, Any] = {
            **_DEFAULT_CONFIG,
            # librdkafka's own log lines (connection refused, ...) go through
            # logging, served by the poll thread, not straight to stderr.
            "logger": logging.getLogger(f"{__name__}.librdkafka"),
            **producer_config,
            "bootstrap.servers": bootstrap,
        }
        self._flush_timeout = flush_timeout
        self._lane: _Lane | None = None
        self._retired: list[_Lane] = []
        self._lock = threading.Lock()

    def _producer(self) -> _Lane:
        with self._lock:
            self._retired = [old for old in self._retired if old.draining()]
            lane = self._lane
            if lane is not None and lane.fatal is not None:
                # Only a new producer (a new producer id) gets out of a fatal
                # state; the old one drains, then fails what it still holds.
                log.warning("replacing the kafka producer after a fatal error")
                lane.retire(self._flush_timeout)
                self._retired.append(lane)
                lane = None
            if lane is None:
                lane = self._lane = _Lane(self._config)
            return lane

    def _refusal(self, owner: str | None, topic: str) -> TargetRefused | None:
        key = (owner, topic)
        if key not in self._checked:
            if len(self._checked) >= 10_000:
                self._checked.clear()  # bounded, whatever the topics
            try:
                if owner is None:
                    check_topic_name(topic)
                else:
                    self._scope.check_topic(owner, topic)
                self._checked[key] = None
            except TargetRefused as exc:
                self._checked[key] = exc
        return self._checked[key]

    async def fire(self, job: ClaimedJob, job_id: str, timeout: float) -> FireResult:
        topic = job.target.get("topic")
        if not isinstance(topic, str) or not topic:
            return FireResult.permanent("KAFKA target has no topic")
        refusal = self._refusal(job.owner, topic)
        if refusal is not None:
            return FireResult.permanent(str(refusal))
        key = job.target.get("key") or job_id
        scheduled_for = format_instant(job.scheduled_for)
        value = firing_body(job, job_id, scheduled_for)
        ikey = idempotency_key(job, job_id, scheduled_for)
        headers: list[tuple[str, str | bytes | None]] = [
            ("Content-Type", b"application/json"),
            ("Idempotency-Key", ikey.encode()),
            ("Vakit-Job-Id", job_id.encode()),
            ("Vakit-Scheduled-For", scheduled_for.encode()),
            ("Vakit-Attempt", str(job.attempt).encode()),
        ]
        if job.owner is not None:
            headers.append(("Vakit-Owner", job.owner.encode()))
        headers.extend(
            (name, v.encode()) for name, v in self._signer.headers(job.owner, ikey, value)
        )
        trace: dict[str, str] = {}
        tracing.inject(trace, job.target.get("traceparent"))
        if trace:
            headers.append(("traceparent", trace["traceparent"].encode()))

        loop = asyncio.get_running_loop()
        done: asyncio.Future[KafkaError | None] = loop.create_future()

        def settle(err: KafkaError | None) -> None:
            # The firing may have timed out or been cancelled meanwhile.
            if not done.done():
                done.set_result(err)

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            # In the poll thread: hand the outcome to the firing's loop.
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, err)

        lane = self._producer()
        try:
            lane.producer.produce(
                topic, value=value, key=str(key), headers=headers, on_delivery=on_delivery
            )
        except BufferError:
            return FireResult.retry("kafka producer queue is full")
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not isinstance(err, KafkaError):
                return FireResult.retry(f"KafkaException: {exc}")
            if err.fatal():
                lane.fatal = err
            return classify(err)
        except (TypeError, ValueError) as exc:
            return FireResult.permanent(f"record refused: {exc}")
        try:
            async with asyncio.timeout(timeout):
                error = await done
        except TimeoutError:
            return FireResult.retry(
                f"timed out after {timeout:g} s waiting for the broker's acknowledgement"
            )
        if error is None:
            return FireResult.success()
        if error.fatal():
            lane.fatal = error
        return classify(error)

    async def close(self) -> None:
        with self._lock:
            lanes = [*self._retired, *([self._lane] if self._lane is not None else [])]
            self._lane, self._retired = None, []
        if not lanes:
            return
        # One thread per lane so each gets the whole flush timeout, not a share.
        counts = await asyncio.gather(
            *(asyncio.to_thread(lane.close, self._flush_timeout) for lane in lanes)
        )
        remaining = sum(counts)
        if remaining:
            log.warning(
                "kafka producer closed with %d undelivered records",
                remaining,
                extra={"undelivered": remaining},
            )
