"""The campaign's load: steady requests through the API, each one recorded.

At ``rate`` requests a second, drawn from a seeded ``random.Random``:
creates (some with an Idempotency-Key, some whose target fails the first
attempt so the worker retries), creates due later that a cancel or a patch
then reaches, and a few cron jobs made at the start. Requests go round the
API processes as a load balancer without health checks would; a keyed
create that is not acknowledged is sent again with the same key to the next
API (``create_retry``), as a careful client does.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from itertools import count
from typing import Any

from benchmarks.campaign.history import Operation, Recorder
from benchmarks.campaign.nodes import TOKEN

__all__ = ["Load", "iso"]

_TIMEOUT = 10.0  # a request without an answer by then is not acknowledged


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _call(
    url: str, method: str, body: Any = None, key: str | None = None
) -> tuple[int | None, Any, str | None]:
    """(status, JSON answer, error); status None when no answer came."""
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT) as resp:
            text = resp.read()
            return int(resp.status), json.loads(text) if text else None, None
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, None, exc.read()[:200].decode(errors="replace")
    except (OSError, ValueError) as exc:
        return None, None, repr(exc)[:200]


class Load:
    def __init__(
        self,
        api_urls: list[str],
        target_url: str,
        recorder: Recorder,
        seed: int,
        *,
        rate: float = 8.0,
        threads: int = 8,
        crons: int = 4,
    ) -> None:
        self.api_urls = api_urls
        self.target = {"kind": "HTTP", "url": target_url}
        self.recorder = recorder
        self.rng = random.Random(f"{seed}/load")
        self.rate = rate
        self.crons = crons
        self._ids = count(1)
        self._next_api = count()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="load")
        self._slots = threading.Semaphore(threads * 2)  # a stalled API backs the load off
        self._later: list[tuple[str, float]] = []  # acked jobs due later: (job, runAt)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    # -- one request, recorded ---------------------------------------------

    def _request(
        self, kind: str, method: str, path: str, body: Any = None, **fields: Any
    ) -> Operation:
        url = self.api_urls[next(self._next_api) % len(self.api_urls)] + "/api/v1" + path
        start = time.time()
        status, answer, error = _call(url, method, body, fields.get("key"))
        ack = status is not None and 200 <= status < 300
        if ack and isinstance(answer, dict) and "jobId" in answer:
            fields["job"] = answer["jobId"]
        op = Operation(
            next(self._ids), kind, start, time.time(), ack, status, error=error, **fields
        )
        self.recorder.add(op)
        return op

    def _create(self, run_at: float, keyed: bool, fail: int, later: bool) -> None:
        tag = f"t{next(self._ids)}"
        key = f"k-{tag}" if keyed else None
        body = {
            "type": "campaign",
            "runAt": iso(run_at),
            "target": self.target,
            "payload": {"tag": tag, "fail": fail},
            "maxAttempts": 10,
            "timeoutSeconds": 10,
        }
        fields = {"key": key, "run_at": run_at, "tag": tag}
        op = self._request("create", "POST", "/jobs", body, **fields)
        for _ in range(3):
            if op.ack or key is None or self._stopping.is_set():
                break
            time.sleep(0.5)
            op = self._request("create_retry", "POST", "/jobs", body, **fields)
        if op.ack and later and op.job:
            with self._lock:
                self._later.append((op.job, run_at))

    def _pick_later(self) -> tuple[str, float] | None:
        """An acknowledged job still a few seconds from due (so a cancel or a
        patch may well reach it SCHEDULED), taken off the list."""
        with self._lock:
            now = time.time()
            self._later = [(j, t) for j, t in self._later if t > now + 2.0]
            if not self._later:
                return None
            return self._later.pop(self.rng.randrange(len(self._later)))

    def _cancel(self) -> None:
        picked = self._pick_later()
        if picked is not None:
            self._request("cancel", "DELETE", f"/jobs/{picked[0]}", job=picked[0])

    def _patch(self) -> None:
        picked = self._pick_later()
        if picked is not None:
            job, run_at = picked
            new = run_at + self.rng.uniform(1.0, 4.0)
            op = self._request(
                "patch", "PATCH", f"/jobs/{job}", {"runAt": iso(new)}, job=job, run_at=new
            )
            if op.ack:
                with self._lock:
                    self._later.append((job, new))

    def _cron(self, i: int) -> None:
        name = f"campaign-cron-{i}"
        body = {
            "name": name,
            "schedule": "* * * * *",
            "timeZone": "UTC",
            "target": self.target,
            "payload": {"cron": name},
            "maxAttempts": 10,
        }
        for _ in range(5):
            if self._request("cron_create", "POST", "/cron-jobs", body, tag=name).ack:
                return
            time.sleep(0.5)

    # -- the schedule ----------------------------------------------------------

    def _submit(self, fn: Any, *args: Any) -> None:
        if not self._slots.acquire(blocking=False):
            return  # every thread is waiting on a stalled API: this tick is skipped

        def run() -> None:
            try:
                fn(*args)
            finally:
                self._slots.release()

        self._pool.submit(run)

    def _run(self) -> None:
        for i in range(self.crons):
            self._submit(self._cron, i)
        while not self._stopping.wait(self.rng.expovariate(self.rate)):
            now = time.time()
            roll = self.rng.random()
            if roll < 0.55:
                fail = 1 if self.rng.random() < 0.15 else 0
                self._submit(
                    self._create,
                    now + self.rng.uniform(1.0, 8.0),
                    self.rng.random() < 0.5,
                    fail,
                    False,
                )
            elif roll < 0.75:
                self._submit(self._create, now + self.rng.uniform(6.0, 15.0), True, 0, True)
            elif roll < 0.87:
                self._submit(self._cancel)
            else:
                self._submit(self._patch)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """No new requests; wait for those in flight."""
        self._stopping.set()
        self._thread.join(timeout=30)
        self._pool.shutdown(wait=True)

    def latest_run_at(self) -> float:
        return max((t for _, t in self._later), default=time.time())
