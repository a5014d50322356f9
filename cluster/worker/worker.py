"""The worker: claim due jobs, fire their targets, record the outcome.

Per owned shard, a claim loop takes a batch of due jobs in one short
transaction (``FOR UPDATE SKIP LOCKED``) and starts one task per job; the
firing happens outside any transaction. Outcomes go to a per-shard completer
that writes them in batches, each row fenced by its attempt. A heartbeat loop
extends the leases of long jobs; a job whose heartbeat or completion matches
no row was lost (its lease expired and someone else has it): the worker drops
it, writes nothing and counts it.

Every loop has a ``run_once`` that tests call directly.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import shardmap
from cluster import metrics
from cluster.backoff import backoff
from cluster.clock import Clock, SystemClock
from cluster.config import Settings
from cluster.coordination.base import Coordinator
from cluster.errors import ShardUnavailable, VakitError
from cluster.model import (
    ClaimedJob,
    ClaimParams,
    FinishParams,
    HeartbeatParams,
    JobResult,
    Outcome,
)
from cluster.store.base import Store
from cluster.targets import FireResult, Target
from cluster.worker.limits import TargetLimiter, parse_limits, target_key

__all__ = ["InFlight", "Worker", "default_worker_id"]

# Queued by stop() after the last outcome: the completer ends once it gets here.
_DRAINED: Any = object()
# Granularity of the preloading wheel, seconds: a held job starts up to one
# tick after its run_at (the event loop's timers are milliseconds anyway).
_TICK = 0.001
# Most held jobs started in one pass of the event loop. A worker holding
# 500,000 jobs due at one instant would otherwise not answer anything (its
# /metrics, its health checks, its completions) for about 5 s; in slices it
# gets back to the loop every few tens of milliseconds.
_SLICE = 5_000

log = logging.getLogger(__name__)


def _log_fields(entry: InFlight) -> dict[str, Any]:
    return {"job_id": entry.job_id, "shard": entry.shard, "attempt": entry.job.attempt}


def _cron_label(job: ClaimedJob) -> str:
    return shardmap.encode_id("cron", job.cron_id) if job.cron_id else "-"


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(slots=True)
class InFlight:
    job: ClaimedJob
    shard: int
    lease_until: datetime
    job_id: str  # the public id, encoded once when claimed (not at the instant)
    task: asyncio.Task[None] | None = None
    fired: bool = False  # the target was (or is being) called
    lost: bool = False  # a heartbeat found the lease gone


@dataclass
class _ShardState:
    inflight: dict[uuid.UUID, InFlight] = field(default_factory=dict)
    results: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)  # JobResult or _DRAINED
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class Worker:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        coordinator: Coordinator,
        targets: dict[str, Target],
        *,
        clock: Clock | None = None,
        worker_id: str | None = None,
        rand: Callable[[], float] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.coordinator = coordinator
        self.targets = targets
        self.clock = clock or SystemClock()
        self.worker_id = worker_id or settings.worker_id or default_worker_id()
        self.limiter = TargetLimiter(parse_limits(settings.target_limits))
        self._rand = rand
        self._shards = {i: _ShardState() for i in range(store.shard_count)}
        self._capacity = asyncio.Event()
        self._stopping = asyncio.Event()
        self._stop_deadline = float("inf")
        self._lateness_children: dict[tuple[int, str], Any] = {}
        self._target_children: dict[tuple[str, str], Any] = {}
        # Metrics of firings, recorded after the firings of the same instant
        # have started (see _note_start).
        self._started: list[tuple[int, str, float]] = []
        self._fired: list[tuple[ClaimedJob, FireResult]] = []
        self._metrics_due = False
        # Instants being started in slices: until the last slice, outcomes
        # and metrics wait (starts first; see _start_held).
        self._starting = 0
        self._all_started = asyncio.Event()
        self._all_started.set()
        self._wheel: dict[int, list[InFlight]] = {}
        self._wheel_timers: dict[int, asyncio.TimerHandle] = {}
        self.polling = asyncio.Event()  # set once every claim loop has polled once
        self._polled: set[int] = set()
        self._tasks: list[asyncio.Task[None]] = []

    # -- state ---------------------------------------------------------------

    @property
    def inflight_count(self) -> int:
        return sum(len(s.inflight) for s in self._shards.values())

    def inflight(self, shard: int) -> dict[uuid.UUID, InFlight]:
        return self._shards[shard].inflight

    # -- claim -------------------------------------------------------------------

    async def run_once(self, shard: int) -> int:
        """Claim one batch on ``shard`` and start firing it; returns the count."""
        room = self.settings.max_inflight - self.inflight_count
        if room <= 0:
            return 0
        jobs = await self.store.claim_jobs(
            shard,
            ClaimParams(
                worker_id=self.worker_id,
                limit=min(self.settings.claim_batch, room),
                lease_seconds=self.settings.lease_seconds,
                grace_seconds=self.settings.lease_grace_seconds,
                prefetch_seconds=self.settings.prefetch_seconds,
            ),
        )
        state = self._shards[shard]
        # One reading of both clocks for the batch: jobs due at the same
        # instant land in the same tick, however long the loop below takes.
        now = self.clock.now()
        base = asyncio.get_running_loop().time()
        for job in jobs:
            entry = InFlight(job, shard, job.lease_until, shardmap.encode_id("job", job.id))
            state.inflight[job.id] = entry
            delay = (job.run_at - now).total_seconds()
            if delay > _TICK:
                self._hold(entry, base + delay)
            else:
                entry.task = asyncio.create_task(self._run_job(entry), name=entry.job_id)
        if jobs:
            metrics.CLAIMED.labels(str(shard)).inc(len(jobs))
            metrics.INFLIGHT.labels(str(shard)).set(len(state.inflight))
        return len(jobs)

    async def _claim_loop(self, shard: int) -> None:
        delay = self.settings.poll_interval
        while not self._stopping.is_set():
            claimed = 0
            if shard in self.coordinator.owned_shards():
                try:
                    claimed = await self.run_once(shard)
                    delay = self.settings.poll_interval
                    self._mark_polled(shard)
                except ShardUnavailable as exc:
                    delay = min(delay * 2, 5.0)
                    log.warning("claim failed: %s", exc, extra={"shard": shard})
                except Exception:
                    # A loop that dies leaves its shard unpolled for the life of
                    # the process: log, back off, go on.
                    delay = min(delay * 2, 5.0)
                    log.exception("claim loop error", extra={"shard": shard})
            if claimed >= self.settings.claim_batch:
                continue  # more may be due: claim again without waiting
            if self.inflight_count >= self.settings.max_inflight:
                self._capacity.clear()
                await self._wait(self._capacity, delay)
            else:
                await self._wait(self._shards[shard].wake, delay)

    def _mark_polled(self, shard: int) -> None:
        if shard not in self._polled:
            self._polled.add(shard)
            if self._polled >= set(self.coordinator.owned_shards()):
                self.polling.set()

    async def _wait(self, event: asyncio.Event, timeout: float) -> None:
        stop = asyncio.ensure_future(self._stopping.wait())
        ev = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait({stop, ev}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            ev.cancel()
        event.clear()

    # -- fire --------------------------------------------------------------------

    # -- preloading: a timing wheel ---------------------------------------------

    def _hold(self, entry: InFlight, due: float) -> None:
        """Keep a prefetched job until its run_at (``due``, in the event
        loop's time). Jobs share one timer per tick: a wave of 50,000
        preloaded jobs costs one timer, and no sleeping coroutine each (less
        memory, less work at the instant)."""
        loop = asyncio.get_running_loop()
        tick = math.ceil(due / _TICK)
        bucket = self._wheel.get(tick)
        if bucket is None:
            bucket = self._wheel[tick] = []
            self._wheel_timers[tick] = loop.call_at(tick * _TICK, self._release_tick, tick)
        bucket.append(entry)

    def _release_tick(self, tick: int) -> None:
        self._wheel_timers.pop(tick, None)
        entries = self._wheel.pop(tick, [])
        if len(entries) > _SLICE:
            self._starting += 1
            self._all_started.clear()
        self._start_held(entries, 0)

    def _start_held(self, entries: list[InFlight], first: int) -> None:
        end = first + _SLICE
        if not self._stopping.is_set():  # else stop() releases the rest
            for entry in entries[first:end]:
                if not entry.lost and entry.task is None:
                    entry.task = asyncio.create_task(self._run_job(entry), name=entry.job_id)
            if end < len(entries):
                # After the tasks just created have taken their first step.
                asyncio.get_running_loop().call_soon(self._start_held, entries, end)
                return
        if len(entries) > _SLICE:
            self._starting -= 1
            if not self._starting:
                self._all_started.set()
                self._metrics_soon()

    def _clear_wheel(self) -> None:
        for handle in self._wheel_timers.values():
            handle.cancel()
        self._wheel_timers.clear()
        self._wheel.clear()

    # -- metrics of firings, recorded just after the instant -----------------

    def _note_start(self, shard: int, kind: str, lateness: float) -> None:
        """Lateness of a firing that starts now. At a round hour tens of
        thousands of jobs start in one pass of the event loop, and every
        microsecond spent per job before the last one starts is lateness of
        the last one: the histogram is fed by _flush_metrics, right after the
        pass."""
        self._started.append((shard, kind, lateness))
        self._metrics_soon()

    def _note_fired(self, job: ClaimedJob, result: FireResult) -> None:
        self._fired.append((job, result))
        self._metrics_soon()

    def _metrics_soon(self) -> None:
        if not self._metrics_due:
            self._metrics_due = True
            asyncio.get_running_loop().call_soon(self._flush_metrics)

    def _flush_metrics(self) -> None:
        self._metrics_due = False
        if self._starting:
            return  # after the last slice (_start_held calls again)
        started, self._started = self._started, []
        fired, self._fired = self._fired, []
        for shard, kind, lateness in started:
            self._lateness_metric(shard, kind).observe(max(0.0, lateness))
        for job, result in fired:
            self._count_firing(job, result)

    def _lateness_metric(self, shard: int, kind: str) -> Any:
        # labels() costs a dict lookup and string work per call; a wave calls
        # it per job, so the children are kept.
        key = (shard, kind)
        child = self._lateness_children.get(key)
        if child is None:
            child = self._lateness_children[key] = metrics.START_LATENESS.labels(str(shard), kind)
        return child

    async def _run_job(self, entry: InFlight) -> None:
        job = entry.job
        shard = entry.shard
        try:
            # Released from the wheel up to a tick early, or claimed just
            # before its moment: wait out the rest with the lease held.
            delay = (job.run_at - self.clock.now()).total_seconds()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.limiter.limits:
                async with self.limiter.slot(target_key(job.target)):
                    outcome = await self._fire(entry)
            else:
                outcome = await self._fire(entry)
            if outcome is not None and not entry.lost:
                self._shards[shard].results.put_nowait(outcome)
        except Exception:  # never let one job's bug leave it in flight forever
            log.exception("job task failed", extra=_log_fields(entry))
            self._shards[shard].results.put_nowait(
                self._result_for(entry, FireResult.retry("worker error"), self.clock.now(), 0.0)
            )

    async def _fire(self, entry: InFlight) -> JobResult | None:
        job = entry.job
        shard = entry.shard
        if entry.lost:
            return None
        started = self.clock.now()
        lateness = (started - job.run_at).total_seconds()
        if job.deadline_at is not None and started > job.deadline_at:
            # A cron occurrence that can no longer start in time is dropped
            # and counted, not fired late.
            metrics.CRON_MISSED.labels(_cron_label(job), "starting_deadline").inc()
            return self._result_for(entry, FireResult.skip("starting deadline passed"), started, lateness)
        if job.concurrency == "REPLACE" and job.cron_id is not None:
            await self.store.revoke_replaced(shard, job.cron_id, job.id)
        kind = job.target_kind
        self._note_start(shard, kind, lateness)
        entry.fired = True
        target = self.targets.get(kind)
        if target is None:
            result = FireResult.permanent(f"no target of kind {kind!r} here")
        else:
            try:
                if getattr(target, "enforces_timeout", False):
                    # The target bounds its own wait; a second timer per
                    # firing would only cost time at the round hour.
                    result = await target.fire(job, entry.job_id, float(job.timeout_seconds))
                else:
                    async with asyncio.timeout(job.timeout_seconds):
                        result = await target.fire(job, entry.job_id, float(job.timeout_seconds))
            except TimeoutError:
                result = FireResult.retry(f"timed out after {job.timeout_seconds} s")
            except Exception as exc:  # a target bug must not kill the worker
                log.exception("target raised", extra=_log_fields(entry))
                result = FireResult.retry(f"{type(exc).__name__}: {exc}")
        self._note_fired(job, result)
        return self._result_for(entry, result, started, lateness)

    def _count_firing(self, job: ClaimedJob, result: FireResult) -> None:
        """The per-target error rate the on-call watches; children cached, as
        the target key parses a URL."""
        url = str(job.target.get("url") or job.target.get("topic") or job.target_kind)
        outcome = "ok" if result.ok else ("retry" if result.retryable else "rejected")
        child = self._target_children.get((url, outcome))
        if child is None:
            if len(self._target_children) > 10_000:
                self._target_children.clear()  # bounded, whatever the URLs
            child = metrics.TARGET_FIRES.labels(target_key(job.target), outcome)
            self._target_children[(url, outcome)] = child
        child.inc()

    def _result_for(
        self, entry: InFlight, result: FireResult, started: datetime, lateness: float
    ) -> JobResult:
        job = entry.job
        lease = job.lease
        if result.ok:
            outcome, delay = Outcome.SUCCEEDED, 0.0
        elif result.skipped:
            outcome, delay = Outcome.SKIPPED, 0.0
        elif result.retryable and job.attempt < job.max_attempts:
            kwargs = {"rand": self._rand} if self._rand else {}
            delay = backoff(
                job.attempt,
                base=self.settings.backoff_base,
                cap=self.settings.backoff_max,
                **kwargs,
            )
            outcome = Outcome.RETRY
        else:
            outcome, delay = Outcome.FAILED, 0.0
        return JobResult(
            lease=lease,
            outcome=outcome,
            worker=self.worker_id,
            started_at=started,
            lateness_seconds=lateness,
            error=result.error,
            retry_delay=delay,
        )

    # -- complete ------------------------------------------------------------------

    def _take_batch(self, state: _ShardState, first: JobResult | None) -> tuple[list[JobResult], bool]:
        """Up to a batch of queued outcomes; True when the drained marker was met."""
        batch = [first] if first is not None else []
        while len(batch) < self.settings.complete_batch and not state.results.empty():
            item = state.results.get_nowait()
            if item is _DRAINED:
                return batch, True
            batch.append(item)
        return batch, False

    async def flush_once(self, shard: int, wait: bool = True) -> int:
        """Write one batch of outcomes for ``shard``; returns how many were written."""
        state = self._shards[shard]
        first = await state.results.get() if wait else None
        batch, _ = self._take_batch(state, first)
        return await self._write(shard, batch)

    async def _write(self, shard: int, batch: list[JobResult]) -> int:
        state = self._shards[shard]
        if not batch:
            return 0
        delay = 0.5
        while True:
            try:
                written = await self.store.finish_jobs(shard, FinishParams(tuple(batch)))
                break
            except ShardUnavailable as exc:
                if self._stopping.is_set() and time.monotonic() > self._stop_deadline:
                    # Stopping, and the shard is still away: give up. The
                    # leases expire and the jobs run again (at least once).
                    log.warning("completion abandoned at stop: %s", exc, extra={"shard": shard})
                    return 0
                # Keep the outcomes and try again; if the lease runs out first
                # the write is fenced and the job runs again (at least once).
                log.warning("completion failed, retrying: %s", exc, extra={"shard": shard})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        succeeded: dict[str, int] = {}
        for res in batch:
            entry = state.inflight.pop(res.lease.id, None)
            kind = entry.job.target_kind if entry else "?"
            if res.lease.id in written and res.outcome is Outcome.SUCCEEDED:
                # The common case stays cheap: counted once per batch, no log line.
                succeeded[kind] = succeeded.get(kind, 0) + 1
                continue
            extra = (
                _log_fields(entry)
                if entry is not None
                else {"job_id": shardmap.encode_id("job", res.lease.id), "shard": shard, "attempt": res.lease.attempt}
            )
            if res.lease.id not in written:
                metrics.FENCED.labels(str(shard), "complete").inc()
                log.warning("completion fenced: the job was no longer ours", extra=extra)
            elif res.outcome is Outcome.RETRY:
                metrics.RETRIED.labels(str(shard), kind).inc()
                log.info("attempt failed, retrying in %.1fs: %s", res.retry_delay, res.error, extra=extra)
            else:
                metrics.FAILED.labels(str(shard), kind).inc()
                log.warning("job failed for good: %s", res.error, extra=extra)
        for kind, n in succeeded.items():
            metrics.COMPLETED.labels(str(shard), kind).inc(n)
        metrics.INFLIGHT.labels(str(shard)).set(len(state.inflight))
        self._capacity.set()
        return len(written)

    async def _complete_loop(self, shard: int) -> None:
        """Write outcomes until stop() queues the drained marker; everything
        queued before it is written, nothing is cancelled mid-batch."""
        state = self._shards[shard]
        while True:
            first = await state.results.get()
            if first is _DRAINED:
                return
            if self.settings.complete_linger:
                await asyncio.sleep(self.settings.complete_linger)
            await self._all_started.wait()
            batch, drained = self._take_batch(state, first)
            try:
                await self._write(shard, batch)
            except Exception:
                log.exception("completion error", extra={"shard": shard})
            if drained:
                return

    # -- heartbeat -------------------------------------------------------------------

    async def heartbeat_once(self, shard: int) -> int:
        """Extend the leases that run out within the next lease period; jobs
        whose lease is gone are dropped. Returns how many were lost."""
        state = self._shards[shard]
        now = self.clock.now()
        horizon = self.settings.lease_seconds
        due = [
            e
            for e in state.inflight.values()
            if not e.lost and (e.lease_until - now).total_seconds() < horizon
        ]
        if not due:
            return 0
        kept = await self.store.heartbeat(
            shard,
            HeartbeatParams(
                leases=tuple(e.job.lease for e in due),
                lease_seconds=self.settings.lease_seconds,
                grace_seconds=self.settings.lease_grace_seconds,
            ),
        )
        lost = 0
        for entry in due:
            if entry.job.id in kept:
                entry.lease_until = max(
                    entry.lease_until,
                    now + timedelta(seconds=self.settings.lease_seconds + self.settings.lease_grace_seconds),
                )
            elif state.inflight.get(entry.job.id) is entry:
                lost += 1
                self._drop(entry, "heartbeat")
        return lost

    def _drop(self, entry: InFlight, operation: str) -> None:
        entry.lost = True
        metrics.FENCED.labels(str(entry.shard), operation).inc()
        log.warning("lease lost: dropping the job, writing nothing", extra=_log_fields(entry))
        self._shards[entry.shard].inflight.pop(entry.job.id, None)
        if entry.task is not None:
            entry.task.cancel()
        self._capacity.set()

    async def _heartbeat_shard(self, shard: int) -> None:
        try:
            # Bounded, and one task per shard: a shard that hangs must not
            # hold back the heartbeats (and so the leases) of the others.
            async with asyncio.timeout(self.settings.heartbeat_every * 2):
                await self.heartbeat_once(shard)
        except VakitError as exc:
            log.warning("heartbeat failed: %s", exc, extra={"shard": shard})
        except TimeoutError:
            log.warning("heartbeat timed out", extra={"shard": shard})
        except Exception:
            log.exception("heartbeat error", extra={"shard": shard})

    async def _heartbeat_loop(self) -> None:
        while not self._stopping.is_set():
            await asyncio.gather(*(self._heartbeat_shard(s) for s in self._shards))
            await self._sleep(self.settings.heartbeat_every)

    async def _beat_loop(self) -> None:
        """Tell each owned shard we poll it (readiness, `vakit status`)."""
        while not self._stopping.is_set():
            for shard in sorted(self.coordinator.owned_shards()):
                try:
                    await self.store.worker_beat(shard, self.worker_id)
                except Exception as exc:  # readiness only; never worth dying for
                    log.debug("beat failed: %s", exc, extra={"shard": shard})
            await self._sleep(5.0)

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass

    # -- lifecycle -----------------------------------------------------------------

    def _wake_all(self) -> None:
        for state in self._shards.values():
            state.wake.set()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        # Ownership changes arrive on the coordinator's threads: poll newly
        # owned shards at once rather than at the next poll interval.
        def on_change() -> None:
            loop.call_soon_threadsafe(self._wake_all)

        self.coordinator.add_listener(on_change)
        for shard in self._shards:
            self._tasks.append(asyncio.create_task(self._claim_loop(shard), name=f"claim-{shard}"))
            self._tasks.append(
                asyncio.create_task(self._complete_loop(shard), name=f"complete-{shard}")
            )
        self._tasks.append(asyncio.create_task(self._heartbeat_loop(), name="heartbeat"))
        self._tasks.append(asyncio.create_task(self._beat_loop(), name="beat"))

    async def stop(self, grace: float | None = None) -> None:
        """Graceful stop: no new claims; in-flight jobs finish within ``grace``
        seconds, the rest are released (never-fired ones with a refund), and
        every outcome produced is written before the completers end."""
        grace = self.settings.stop_grace_seconds if grace is None else grace
        self._stop_deadline = time.monotonic() + grace + self.settings.connect_timeout
        self._stopping.set()
        # Held (preloaded) jobs are not started any more: they are released.
        self._clear_wheel()
        pending = [e.task for s in self._shards.values() for e in s.inflight.values() if e.task]
        if pending:
            await asyncio.wait(pending, timeout=grace)
        # Release what did not finish in time.
        for shard, state in self._shards.items():
            unfinished = [e for e in state.inflight.values() if e.task is None or not e.task.done()]
            for entry in unfinished:
                if entry.task is not None:
                    entry.task.cancel()
            if unfinished:
                await asyncio.gather(*(e.task for e in unfinished if e.task), return_exceptions=True)
                try:
                    await self.store.release_jobs(
                        shard,
                        [e.job.lease for e in unfinished],
                        [not e.fired for e in unfinished],
                        self.worker_id,
                    )
                except Exception as exc:
                    log.warning("release failed (leases will expire): %s", exc, extra={"shard": shard})
                for entry in unfinished:
                    state.inflight.pop(entry.job.id, None)
        # Let each completer write everything queued so far, then end.
        for state in self._shards.values():
            state.results.put_nowait(_DRAINED)
        completers = [t for t in self._tasks if t.get_name().startswith("complete-")]
        others = [t for t in self._tasks if t not in completers]
        for task in others:
            task.cancel()
        if completers:
            budget = max(1.0, self._stop_deadline - time.monotonic() + 5.0)
            done, late = await asyncio.wait(completers, timeout=budget)
            for task in late:
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
