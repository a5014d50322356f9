"""The completer: one shard's outcomes written in batches, each fenced.

Firing tasks queue their outcome; the completer writes up to a batch at a
time with one statement (``finish_jobs``), each row fenced by its attempt,
and then forgets the jobs. An outcome whose row is no longer ours (the lease
ran out and someone else has the job) is counted and logged, never retried.
A shard that cannot be reached keeps the outcomes queued and is tried again:
if the lease runs out first, the write is fenced and the job runs again (at
least once).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import shardmap
from cluster import metrics
from cluster.errors import ShardUnavailable, SlotMoving
from cluster.model import FinishParams, JobResult, Outcome
from cluster.store.contracts.claims import JobClaims
from cluster.targets import FireResult
from cluster.worker.inflight import InFlight, log_fields, refused_for_move

__all__ = ["Completer", "Fired"]

# A firing's outcome as it left the firing: the entry, the target's result,
# the start (POSIX seconds) and its lateness. ``settle`` makes it a JobResult.
Fired = tuple[InFlight, FireResult, float, float]

# Queued by drain() after the last outcome: the completer ends once it gets here.
_DRAINED: Any = object()

log = logging.getLogger(__name__)


class Completer:
    """Writes the outcomes of ``shard``'s jobs, forgetting each job from
    ``inflight`` once written. ``started`` is set while no instant is being
    started in slices (starts come first); ``give_up()`` says the worker is
    stopping and out of time; ``on_written`` runs after each batch (there is
    room to claim again)."""

    def __init__(
        self,
        shard: int,
        store: JobClaims,
        inflight: dict[uuid.UUID, InFlight],
        *,
        batch: int,
        linger: float,
        started: asyncio.Event,
        give_up: Callable[[], bool],
        on_written: Callable[[], None],
        owners: frozenset[str] = frozenset(),
        settle: Callable[[InFlight, FireResult, float, float], JobResult] | None = None,
        on_refused: Callable[[JobResult, InFlight | None], None] | None = None,
    ) -> None:
        self.shard = shard
        # The owners the dead-letter metric names (the configured tenants);
        # any other is 'other', so the label stays bounded.
        self._owners = owners
        self.store = store
        self.inflight = inflight
        self._batch = batch
        self._linger = linger
        self._started = started
        self._give_up = give_up
        self._on_written = on_written
        self._settle = settle
        # An outcome the shard refused because the job's slot is moving off
        # it (issue 42): handed back to the worker, which writes it where the
        # slot went once the map says so.
        self._on_refused = on_refused
        # JobResult, Fired or _DRAINED. A deque and an event rather than an
        # asyncio.Queue: every firing puts one, and the queue's put and get
        # cost 0.37 us against 0.05 (its bookkeeping serves join(), unused).
        self._results: deque[Any] = deque()
        self._ready = asyncio.Event()

    def put(self, result: JobResult) -> None:
        self._push(result)

    def put_fired(self, fired: Fired) -> None:
        """Queue a firing's outcome as the firing left it: its JobResult is
        made when a batch takes it (after the instant, not during it)."""
        self._push(fired)

    def drain(self) -> None:
        """Write everything queued so far, then end :meth:`run`."""
        self._push(_DRAINED)

    def _push(self, item: Any) -> None:
        self._results.append(item)
        if not self._ready.is_set():
            self._ready.set()

    async def _next(self) -> Any:
        """The oldest queued outcome (or the drained marker), once there is one."""
        while not self._results:
            self._ready.clear()
            await self._ready.wait()
        return self._results.popleft()

    def _take_batch(self, first: Any) -> tuple[list[JobResult], bool]:
        """Up to a batch of queued outcomes; True when the drained marker was met."""
        batch = [self._result(first)] if first is not None else []
        results = self._results
        while len(batch) < self._batch and results:
            item = results.popleft()
            if item is _DRAINED:
                return batch, True
            batch.append(self._result(item))
        return batch, False

    def _result(self, item: JobResult | Fired) -> JobResult:
        if type(item) is tuple:  # Fired (a JobResult is a named tuple)
            assert self._settle is not None, "put_fired needs a Completer made with settle"
            return self._settle(*item)
        return item  # type: ignore[return-value]

    async def flush_once(self, wait: bool = True) -> int:
        """Write one batch of outcomes; returns how many were written."""
        first = await self._next() if wait else None
        batch, _ = self._take_batch(first)
        return await self.write(batch)

    async def write(self, batch: list[JobResult]) -> int:
        if not batch:
            return 0
        shard = self.shard
        delay = 0.5
        refused: frozenset[uuid.UUID] = frozenset()
        while True:
            try:
                written = await self.store.finish_jobs(shard, FinishParams(tuple(batch)))
                break
            except SlotMoving as exc:
                # The others of the batch are written; the refused ones
                # belong to the slot's new owner, not written here.
                written, refused = refused_for_move(exc, "completion", shard)
                break
            except ShardUnavailable as exc:
                if self._give_up():
                    # Stopping, and the shard is still away: give up. The
                    # leases expire and the jobs run again (at least once).
                    log.warning("completion abandoned at stop: %s", exc, extra={"shard": shard})
                    return 0
                # Keep the outcomes and try again; if the lease runs out first
                # the write is fenced and the job runs again (at least once).
                log.warning("completion failed, retrying: %s", exc, extra={"shard": shard})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        self._account(batch, written, refused)
        return len(written)

    def _account(
        self,
        batch: list[JobResult],
        written: set[uuid.UUID],
        refused: frozenset[uuid.UUID] = frozenset(),
    ) -> None:
        shard = self.shard
        succeeded: dict[str, int] = {}
        for res in batch:
            entry = self.inflight.pop(res.lease.id, None)
            kind = entry.job.target_kind if entry else "?"
            if res.lease.id in written and res.outcome is Outcome.SUCCEEDED:
                # The common case stays cheap: counted once per batch, no log line.
                succeeded[kind] = succeeded.get(kind, 0) + 1
                continue
            extra = (
                log_fields(entry)
                if entry is not None
                else {
                    "job_id": shardmap.encode_id("job", res.lease.id),
                    "shard": shard,
                    "attempt": res.lease.attempt,
                }
            )
            if res.lease.id in refused:
                if self._on_refused is not None:
                    self._on_refused(res, entry)
                else:
                    log.warning("completion refused: the job's slot is moving", extra=extra)
            elif res.lease.id not in written:
                metrics.FENCED.labels(str(shard), "complete").inc()
                log.warning("completion fenced: the job was no longer ours", extra=extra)
            elif res.outcome is Outcome.RETRY:
                metrics.RETRIED.labels(str(shard), kind).inc()
                log.info(
                    "attempt failed, retrying in %.1fs: %s", res.retry_delay, res.error, extra=extra
                )
            else:
                owner = entry.job.owner if entry is not None else None
                label = owner if owner in self._owners else "other"
                metrics.FAILED.labels(str(shard), kind, label).inc()
                log.warning("job failed for good: %s", res.error, extra=extra)
        for kind, n in succeeded.items():
            metrics.COMPLETED.labels(str(shard), kind).inc(n)
        metrics.INFLIGHT.labels(str(shard)).set(len(self.inflight))
        self._on_written()

    async def run(self) -> None:
        """Write outcomes until :meth:`drain`; everything queued before it is
        written, nothing is cancelled mid-batch."""
        while True:
            first = await self._next()
            if first is _DRAINED:
                return
            if self._linger:
                await asyncio.sleep(self._linger)
            await self._started.wait()
            batch, drained = self._take_batch(first)
            try:
                await self.write(batch)
            except Exception:
                log.exception("completion error", extra={"shard": self.shard})
            if drained:
                return
