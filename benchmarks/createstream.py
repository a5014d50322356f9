"""A steady stream of single creates through the API, in a thread of its
own, until told to stop: every request's send time, latency and answer.

benchmarks.reshard runs it for the whole time the slots move, so that some
creates meet a moving slot (a 503 with ``Retry-After``, or a short wait) and
their jobs, due a few seconds later, fire while the moves go on. Open loop,
as ``benchmarks.sustained``: request *i* is due at ``i / rate`` seconds
whatever the API's latency, and its latency counts from then; the lean
client (benchmarks/leanhttp.py) keeps the generator's CPU small. A refused
create is not sent again: its job does not exist, and the audit expects
only the jobs the API said it created.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvloop

from benchmarks.leanhttp import HttpError, LeanClient
from benchmarks.stats import summarize

__all__ = ["CreateStream", "StreamRequest", "request_figures", "status_series"]


@dataclass(frozen=True, slots=True)
class StreamRequest:
    sent: float  # epoch seconds when it was due (open loop)
    latency: float  # seconds from due to answer
    service: float  # seconds from sent to answer
    status: str  # "201", "503", … or the exception's name
    job_id: str | None
    n: int = -1  # its place in the stream (the job's payload index)


@dataclass
class CreateStream:
    """POSTs ``body_for(n)`` to ``/api/v1/jobs`` ``rate`` times a second,
    taking the API processes at ``urls`` in turn, from :meth:`start` to
    :meth:`stop`."""

    urls: list[str]
    token: str
    body_for: Callable[[int], dict[str, Any]]
    rate: float
    concurrency: int = 64
    requests: list[StreamRequest] = field(default_factory=list)
    # The first answers of each kind that were not a create: what a 503 said.
    error_samples: dict[str, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _error: BaseException | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="create-stream", daemon=True)
        self._thread.start()

    def stop(self) -> list[StreamRequest]:
        """Stop sending, wait for the answers in flight; every request."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise RuntimeError("the create stream failed") from self._error
        return self.requests

    def _run(self) -> None:
        try:
            uvloop.run(self._load())
        except BaseException as exc:  # reported by stop(), in the caller's thread
            self._error = exc

    async def _load(self) -> None:
        loop = asyncio.get_running_loop()
        headers = {"Authorization": f"Bearer {self.token}"}
        clients = [LeanClient(u, headers, connections=self.concurrency) for u in self.urls]
        gate = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task[None]] = set()
        # Epoch and loop clocks side by side: a request's send time is
        # compared with the moves' (epoch) times.
        epoch0, start = time.time(), loop.time()

        async def one(client: LeanClient, n: int, due: float) -> None:
            async with gate:
                sent = loop.time()
                job_id = None
                try:
                    r = await client.post("/api/v1/jobs", orjson.dumps(self.body_for(n)))
                    status = str(r.status)
                    if r.status in (200, 201):
                        job_id = orjson.loads(r.body).get("jobId")
                    elif len(self.error_samples) < 5 and status not in self.error_samples:
                        self.error_samples[status] = r.body[:400].decode(errors="replace")
                except (OSError, HttpError, TimeoutError) as exc:
                    status = type(exc).__name__
                done = loop.time()
            self.requests.append(
                StreamRequest(epoch0 + (due - start), done - due, done - sent, status, job_id, n)
            )

        try:
            n = 0
            while not self._stop.is_set():
                due = start + n / self.rate
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(min(delay, 0.5))
                    continue
                task = asyncio.create_task(one(clients[n % len(clients)], n, due))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                n += 1
            await asyncio.gather(*tasks)
        finally:
            for client in clients:
                await client.close()


def request_figures(requests: Iterable[StreamRequest], lo: float, hi: float) -> dict[str, Any]:
    """The stream's requests due within ``[lo, hi)``: how many, their
    latency, their answers, the share answered 503 and any other 5xx (or a
    failed connection), which a move must never cause."""
    mine = [r for r in requests if lo <= r.sent < hi]
    statuses = Counter(r.status for r in mine)
    other = {s: n for s, n in statuses.items() if s != "503" and not s.startswith(("2", "4"))}
    return {
        "from": lo,
        "to": hi,
        "requests": len(mine),
        "per_second": round(len(mine) / (hi - lo), 1) if hi > lo else None,
        "latency_seconds": summarize(r.latency for r in mine),
        "service_seconds": summarize(r.service for r in mine),
        "statuses": dict(statuses),
        "share_503": statuses["503"] / len(mine) if mine else None,
        "errors_other_than_503": sum(other.values()),
    }


def status_series(requests: Iterable[StreamRequest], origin: float) -> list[list[int]]:
    """Per second from ``origin`` (epoch seconds) by when each request was
    due: ``[second, requests, 503s, other 5xx or failed]``, for the seconds
    that had a request. Where in a move the 503s came shows here."""
    bins: dict[int, list[int]] = {}
    for r in requests:
        second = math.floor(r.sent - origin)
        row = bins.setdefault(second, [second, 0, 0, 0])
        row[1] += 1
        if r.status == "503":
            row[2] += 1
        elif not r.status.startswith(("2", "4")):
            row[3] += 1
    return [bins[k] for k in sorted(bins)]
