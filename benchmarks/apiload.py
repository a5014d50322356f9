"""Create a benchmark's jobs or crons through Vakit's HTTP API, as fast as
the API takes them.

The batch endpoints (``POST /api/v1/jobs:batch``, ``POST
/api/v1/cron-jobs:batch``) take up to 1,000 items per request and answer each
item on its own (``{"results": [{"index", "status", …}, …]}``). Several
requests are in flight at once, spread over the API processes the way a load
balancer would, so the harness is not what limits the rate; a body is encoded
right before it is sent, so a million items never sit in memory at once.

An item the API turns away for overload (429/503, for the whole request or
for the item) is sent again after ``Retry-After``, as a well-behaved client
would. That is safe: a job item carries an idempotency key and a cron a name
unique per owner, so a repeat answers 200 with the first one and never
creates a second.

Where a batch endpoint does not exist (404/405 to an empty batch), the items
go one per request to the single-create endpoint, and the result says so
(``mode: "single"``): a figure measured that way is not a batch figure.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from benchmarks.progress import Progress

__all__ = [
    "CRONS",
    "JOBS",
    "CreateResult",
    "Door",
    "ItemSource",
    "OnAccepted",
    "batch_supported",
    "create_items",
]

log = logging.getLogger("benchmarks.apiload")

# An item gets this many tries in all (the first one included) before its
# last answer is recorded as its status.
_TRIES = 8
# Single creates need many more requests in flight than batches do to keep
# the API busy: one item per round trip.
_SINGLE_PER_CLIENT = 8
_ERROR_SAMPLES = 5


@dataclass(frozen=True)
class Door:
    """One kind of thing the API creates: its endpoints, and where a batch
    body carries the items."""

    name: str
    single_path: str
    batch_path: str
    batch_field: str
    # The item field that a single create sends as the Idempotency-Key
    # header instead of in the body; None: no such field.
    key_field: str | None = None


JOBS = Door("jobs", "/api/v1/jobs", "/api/v1/jobs:batch", "jobs", key_field="idempotencyKey")
CRONS = Door("cron-jobs", "/api/v1/cron-jobs", "/api/v1/cron-jobs:batch", "cronJobs")

# (bearer token, number of items, item i's request body) for one owner.
ItemSource = tuple[str, int, Callable[[int], dict[str, Any]]]
# Told of each item the API accepted: (source, item index, its answer: a
# batch's result entry, or a single create's document).
OnAccepted = Callable[[int, int, dict[str, Any]], None]


@dataclass
class CreateResult:
    """What the API answered to a whole creation: one status per item (the
    last answer it got), and the requests it took."""

    door: str
    mode: str  # "batch" or "single"
    batch: int  # items per request (1 in single mode)
    in_flight: int  # requests in flight at most
    api_processes: int
    requested: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    request_statuses: Counter[str] = field(default_factory=Counter)
    resent_items: int = 0
    request_seconds: list[float] = field(default_factory=list)
    seconds: float = 0.0
    error_samples: list[str] = field(default_factory=list)

    @property
    def created(self) -> int:
        return self.statuses["201"]

    @property
    def existing(self) -> int:
        return self.statuses["200"]

    @property
    def accepted(self) -> int:
        """Items that exist now (created, or found by a repeat)."""
        return self.created + self.existing

    @property
    def items_per_s(self) -> float | None:
        return self.accepted / self.seconds if self.seconds > 0 else None

    def as_dict(self, api_cpu_seconds: float | None = None) -> dict[str, Any]:
        from benchmarks.stats import summarize

        per_item = (
            round(api_cpu_seconds / self.accepted * 1e6, 1)
            if api_cpu_seconds is not None and self.accepted
            else None
        )
        return {
            "door": self.door,
            "mode": self.mode,
            "batch": self.batch,
            "in_flight": self.in_flight,
            "api_processes": self.api_processes,
            "requested": self.requested,
            "accepted": self.accepted,
            "created": self.created,
            "existing": self.existing,
            "statuses": dict(self.statuses),
            "requests": self.requests,
            "request_statuses": dict(self.request_statuses),
            "resent_items": self.resent_items,
            "seconds": round(self.seconds, 3),
            "items_per_s": round(self.items_per_s, 1) if self.items_per_s else None,
            "request_seconds": summarize(self.request_seconds),
            "api_cpu_seconds": round(api_cpu_seconds, 2) if api_cpu_seconds is not None else None,
            "api_cpu_us_per_item": per_item,
            "error_samples": self.error_samples,
        }


@dataclass
class _Chunk:
    source: int  # index into the sources
    indices: Sequence[int]
    tries: int = 0


async def batch_supported(url: str, token: str, door: Door) -> bool:
    """Whether the API at ``url`` has ``door``'s batch endpoint: an empty
    batch creates nothing, and an API without the route answers 404/405."""
    headers = {"Authorization": f"Bearer {token}"}
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(url + door.batch_path, json={door.batch_field: []}, headers=headers) as r,
    ):
        await r.read()
        return r.status not in (404, 405)


def _retry_after(headers: Any) -> float:
    try:
        return max(0.05, min(float(headers.get("Retry-After", "0.5")), 10.0))
    except ValueError:
        return 0.5


async def create_items(
    urls: list[str],
    sources: list[ItemSource],
    door: Door,
    *,
    batch: int = 1000,
    clients: int = 8,
    request_timeout: float = 300.0,
    on_accepted: OnAccepted | None = None,
) -> CreateResult:
    """Create every item of ``sources`` through ``door`` on the APIs at
    ``urls``: ``batch`` items per request (1: the single endpoint),
    ``clients`` requests in flight. Owners are interleaved, chunk by chunk,
    as many services creating at once would be. ``on_accepted`` hears of
    each item created or found (e.g. to keep the ids)."""
    if batch < 1 or clients < 1 or not urls:
        raise ValueError("batch and clients must be positive, and urls given")
    mode = "single"
    if batch > 1:
        mode = "batch" if await batch_supported(urls[0], sources[0][0], door) else "single"
        if mode == "single":
            log.warning("%s has no batch endpoint here: creating one item per request", door.name)
    per_request = batch if mode == "batch" else 1
    in_flight = clients if mode == "batch" else clients * _SINGLE_PER_CLIENT
    result = CreateResult(door.name, mode, per_request, in_flight, len(urls))
    result.requested = sum(count for _, count, _ in sources)

    queue: asyncio.Queue[_Chunk] = asyncio.Queue()
    per_source = [
        [range(s, min(s + per_request, count)) for s in range(0, count, per_request)]
        for _, count, _ in sources
    ]
    # Round-robin over owners, so each owner's items are spread over the run.
    for i in range(max((len(c) for c in per_source), default=0)):
        for src, chunks in enumerate(per_source):
            if i < len(chunks):
                queue.put_nowait(_Chunk(src, chunks[i]))

    sent = 0
    # Printed whatever the verbosity: a million items take minutes to create.
    progress = Progress(f"{door.name} answered", result.requested)

    def note_error(text: str) -> None:
        if len(result.error_samples) < _ERROR_SAMPLES and text not in result.error_samples:
            result.error_samples.append(text)

    async def send(session: aiohttp.ClientSession, chunk: _Chunk) -> None:
        nonlocal sent
        token, _, make = sources[chunk.source]
        url = urls[sent % len(urls)]
        sent += 1
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        bodies = [make(i) for i in chunk.indices]
        if mode == "batch":
            # orjson: the load generator shares the machine with the API, and
            # the standard library's encoder cost it 8-9 us a job.
            data = orjson.dumps({door.batch_field: bodies})
            path = door.batch_path
        else:
            body = dict(bodies[0])
            if door.key_field and door.key_field in body:
                headers["Idempotency-Key"] = str(body.pop(door.key_field))
            data = orjson.dumps(body)
            path = door.single_path
        chunk.tries += 1
        began = time.monotonic()
        try:
            async with session.post(url + path, data=data, headers=headers) as r:
                raw = await r.read()
                status, retry_after = r.status, _retry_after(r.headers)
            # What an error sample shows; a success is read as JSON below.
            text = raw[:400].decode("utf-8", "replace") if status >= 300 else ""
        except (aiohttp.ClientError, TimeoutError) as exc:
            raw, status, text, retry_after = b"", 0, f"{type(exc).__name__}: {exc}", 0.5
        result.requests += 1
        result.request_seconds.append(time.monotonic() - began)
        result.request_statuses[str(status) if status else "error"] += 1
        if status in (0, 429, 503):
            # The whole request was turned away (or lost): every item again.
            await _again(chunk, list(chunk.indices), retry_after, status or "error", text)
            return
        if mode == "single" or status != 200:
            # A single create's status is the item's; a batch refused as a
            # whole (401, 413, 422…) gives every item that status.
            if status >= 300:
                note_error(f"{status} {text[:300]}")
            elif on_accepted is not None and mode == "single":
                on_accepted(chunk.source, chunk.indices[0], orjson.loads(raw))
            result.statuses[str(status)] += len(chunk.indices)
            return
        results = orjson.loads(raw).get("results", [])
        again: list[int] = []
        answered = set()
        for item in results:
            position = int(item["index"])
            answered.add(position)
            item_status = int(item["status"])
            if item_status in (429, 503):
                again.append(chunk.indices[position])
                continue
            if item_status >= 300:
                note_error(f"item {item_status} {json.dumps(item)[:300]}")
            elif on_accepted is not None:
                on_accepted(chunk.source, chunk.indices[position], item)
            result.statuses[str(item_status)] += 1
        missing = len(chunk.indices) - len(answered)
        if missing:
            note_error(f"{missing} items of a batch had no result")
            result.statuses["no result"] += missing
        if again:
            await _again(_Chunk(chunk.source, again, chunk.tries), again, retry_after, 429, "")

    async def _again(
        chunk: _Chunk, indices: list[int], delay: float, status: int | str, text: str
    ) -> None:
        if chunk.tries >= _TRIES:
            note_error(f"gave up after {chunk.tries} tries: {status} {text[:200]}")
            result.statuses[str(status)] += len(indices)
            return
        result.resent_items += len(indices)
        await asyncio.sleep(delay)
        queue.put_nowait(_Chunk(chunk.source, indices, chunk.tries))

    async def client(session: aiohttp.ClientSession) -> None:
        while True:
            chunk = await queue.get()
            try:
                await send(session, chunk)
            except Exception as exc:  # recorded, never silently dropped
                note_error(f"client error: {type(exc).__name__}: {exc}")
                result.statuses["client error"] += len(chunk.indices)
            finally:
                progress.update(sum(result.statuses.values()))
                queue.task_done()

    connector = aiohttp.TCPConnector(limit=in_flight)
    timeout = aiohttp.ClientTimeout(total=request_timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.monotonic()
        tasks = [asyncio.create_task(client(session)) for _ in range(in_flight)]
        try:
            await queue.join()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        result.seconds = time.monotonic() - started
    progress.close()
    return result
