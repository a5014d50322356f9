"""Helpers shared by the integration and fault tests."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import psycopg

import shardmap
from cluster.cron.plan import cron_slot
from cluster.model import ClaimedJob, CreateJobParams, CronRecord

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T], timeout: float = 30.0, interval: float = 0.1, what: str = "condition"
) -> T:
    """Poll until ``condition()`` is truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass
class Firing:
    job_id: str
    attempt: int
    scheduled_for: str
    idempotency_key: str
    payload: Any
    at: float
    # As received: what a receiver verifies a signature over.
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass
class Sink:
    """A real HTTP target on loopback that logs every firing.

    Payload knobs: ``{"sleep": s}`` answers after ``s`` seconds;
    ``{"fail": n}`` answers 503 to the first ``n`` attempts;
    ``{"status": code}`` always answers ``code``.
    """

    server: ThreadingHTTPServer
    firings: list[Firing] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/fire"

    def by_job(self) -> dict[str, list[Firing]]:
        with self.lock:
            out: dict[str, list[Firing]] = {}
            for f in self.firings:
                out.setdefault(f.job_id, []).append(f)
            return out

    def count(self) -> int:
        with self.lock:
            return len(self.firings)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_sink() -> Sink:
    sink: Sink

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.loads(raw)
            payload = body.get("payload") or {}
            with sink.lock:
                sink.firings.append(
                    Firing(
                        body["jobId"],
                        body["attempt"],
                        body["scheduledFor"],
                        self.headers.get("Idempotency-Key", ""),
                        payload,
                        time.monotonic(),
                        dict(self.headers.items()),
                        raw,
                    )
                )
            status = 200
            if isinstance(payload, dict):
                if payload.get("sleep"):
                    time.sleep(float(payload["sleep"]))
                if body["attempt"] <= int(payload.get("fail", 0)):
                    status = 503
                status = int(payload.get("status", status))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    sink = Sink(server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return sink


def job_params(
    url: str,
    *,
    run_at: datetime | None = None,
    owner: str = "svc",
    payload: Any = None,
    max_attempts: int = 3,
    timeout: int = 30,
    key: str | None = None,
    kind: str = "HTTP",
    far: bool = False,
) -> CreateJobParams:
    run_at = run_at or datetime.now(UTC) - timedelta(seconds=1)
    slot = shardmap.key_slot(owner, key) if key else None
    target = {"kind": kind, "url": url} if kind == "HTTP" else {"kind": kind}
    return CreateJobParams(
        id=shardmap.new_uuid(slot),
        owner=owner,
        type="TEST",
        run_at=run_at,
        scheduled_for=run_at,
        target=target,
        payload=payload if payload is not None else {},
        max_attempts=max_attempts,
        timeout_seconds=timeout,
        idempotency_key=key,
        fingerprint="fp" if key else None,
        far=far,
    )


async def eventually(
    condition: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1, what: str = "condition"
) -> Any:
    """Async ``wait_for``: ``condition`` may be a plain or an async callable."""
    import asyncio
    import inspect

    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(interval)


def claimed_job(
    target: dict[str, Any],
    *,
    attempt: int = 1,
    type: str = "test.firing",
    payload_json: str = "{}",
    scheduled_for: datetime | None = None,
    timeout: int = 30,
    owner: str | None = None,
    run_at: datetime | None = None,
) -> ClaimedJob:
    """A job as a worker holds it after a claim, for firing a target directly."""
    when = scheduled_for or datetime(2026, 11, 30, tzinfo=UTC)
    return ClaimedJob(
        id=shardmap.new_uuid(),
        attempt=attempt,
        max_attempts=5,
        type=type,
        scheduled_for=when,
        run_at=run_at or when,
        timeout_seconds=timeout,
        target=target,
        payload_json=payload_json,
        lease_until=when + timedelta(minutes=1),
        owner=owner,
    )


def webhook_signatures_valid(secret: str, msg_id: str, timestamp: str, body: bytes, header: str) -> bool:
    """A receiver's check of a Standard Webhooks signature, written from the
    specification (not from Vakit's signer): any ``v1,`` entry of ``header``
    that is the base64 HMAC-SHA256 of ``id.timestamp.body`` under the
    secret (``whsec_`` + base64 of the key) verifies."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(
        hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    ).decode()
    return any(
        version == "v1" and hmac.compare_digest(sig, expected)
        for version, _, sig in (entry.partition(",") for entry in header.split())
    )


def cron_record(
    owner: str = "svc",
    name: str = "c",
    *,
    next_fire_at: datetime,
    schedule: str = "0 * * * *",
    **over: Any,
) -> CronRecord:
    """A valid cron definition for writing straight through a cron store or
    planning with :func:`cluster.cron.plan.plan`: hourly, UTC, an HTTP
    target, RUN_ONCE, ALLOW; ``over`` replaces any field."""
    base = CronRecord(
        id=shardmap.new_uuid(cron_slot(owner, name)),
        owner=owner,
        name=name,
        schedule=schedule,
        schedule_kind="CRON",
        time_zone="UTC",
        type=name,
        target={"kind": "HTTP", "url": "https://x.example/"},
        payload={"n": name},
        misfire_policy="RUN_ONCE",
        concurrency="ALLOW",
        jitter_seconds=0,
        max_attempts=3,
        timeout_seconds=60,
        starting_deadline_seconds=None,
        enabled=True,
        anchor=datetime(1970, 1, 1, tzinfo=UTC),
        next_fire_at=next_fire_at,
        fingerprint=f"fp-{name}",
    )
    return dataclasses.replace(base, **over)


def finished_history(
    dsn: str,
    finishes: Sequence[tuple[uuid.UUID | None, datetime]],
    *,
    owner: str = "svc",
    folded_until: datetime,
) -> None:
    """SUCCEEDED rows straight into a shard's history, one per (cron id or
    None, finish time), and the cron fold's watermark put at
    ``folded_until``: what a fold test starts from, without running the jobs."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.cursor() as cur, cur.copy(
            "COPY job_history (id, owner_service, type, cron_id, scheduled_for, run_at, status, attempt,"
            " max_attempts, timeout_seconds, target_kind, target, payload, created_at, finished_at)"
            " FROM STDIN"
        ) as copy:
            for cron_id, at in finishes:
                copy.write_row((shardmap.new_uuid(), owner, "t", cron_id, at, at, "SUCCEEDED", 1, 3, 30,
                                "NOOP", '{"kind": "NOOP"}', "{}", at, at))  # fmt: skip
        conn.execute("UPDATE cron_success_fold SET folded_until = %s", (folded_until,))


def fold_watermark(dsn: str) -> datetime:
    """The cron fold's watermark on a shard (cron_success_fold)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT folded_until FROM cron_success_fold").fetchone()
    assert row is not None
    at: datetime = row[0]
    return at
