"""Keyed creates through the API from a few threads, for the fault tests:
every answer is kept (status and job id per key), so a test can check after
a fault that each 2xx is a job and each key one job."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import httpx

import shardmap
from tests.pgfixtures import SHARDS
from tests.procs import TOKEN
from tests.shards import api_body

__all__ = ["Load"]

SHARD_MAP = shardmap.ShardMap(SHARDS)


class Load:
    """Keyed creates from a few threads, each remembered with its answer."""

    def __init__(self, base_url: str, url: str, threads: int = 4) -> None:
        self.base_url = base_url
        self.url = url
        self.answers: dict[str, tuple[int, str | None]] = {}  # key -> (status, jobId)
        self.created_on: dict[int, float] = {}  # shard -> when a create there last succeeded
        self.created_at: list[float] = []  # when each 2xx came
        self._bodies: dict[str, dict[str, object]] = {}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(threads)
        ]

    def body(self, key: str) -> dict[str, object]:
        """The body sent with ``key``, the same every time: a retry must be a
        repeat of the first request, not another one under its key."""
        body = self._bodies.get(key)
        if body is None:
            body = api_body(self.url, datetime.now(UTC) + timedelta(seconds=1), {"key": key})
            self._bodies[key] = body
        return body

    def _run(self, thread: int) -> None:
        # The URL is read for each request: a test may point the load at
        # another API process (its base_url) while it runs.
        with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
            i = 0
            while not self._stop.is_set():
                key = f"load-{thread}-{i}"
                i += 1
                try:
                    resp = client.post(
                        self.base_url + "/api/v1/jobs",
                        json=self.body(key),
                        headers={"Idempotency-Key": key},
                    )
                    job = resp.json().get("jobId") if resp.status_code < 300 else None
                    self.answers[key] = (resp.status_code, job)
                except httpx.TransportError:
                    # No answer: the API died, or is not back yet.
                    self.answers[key] = (0, None)
                    time.sleep(0.05)
                    continue
                if job is not None:
                    self.created_at.append(time.monotonic())
                    shard = SHARD_MAP.shard_of(shardmap.decode_id("job", job))
                    self.created_on[shard] = time.monotonic()

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def refused(self) -> list[str]:
        """The keys whose create got no 2xx (a 503, or no answer)."""
        return [k for k, (status, _) in self.answers.items() if status not in (200, 201)]

    def retry_refused(self, client: httpx.Client) -> dict[str, str]:
        """Send every refused create again with its key: created now, or
        already (its commit landed before the fault), one job either way.
        Returns the job of every key, all of them answered now."""
        for key in self.refused():
            resp = client.post(
                "/api/v1/jobs", json=self.body(key), headers={"Idempotency-Key": key}
            )
            assert resp.status_code in (200, 201), resp.text
            self.answers[key] = (resp.status_code, resp.json()["jobId"])
        accepted = {key: job for key, (_, job) in self.answers.items() if job}
        assert len(accepted) == len(self.answers)
        return accepted
