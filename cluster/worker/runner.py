"""Running one job: wait out its instant (and its place in its key's
rate, when a limit admitted it), fire its target within its timeout, and
hand the outcome to its shard's completer.

What a worker does per job, apart from what it does per claim
(:mod:`cluster.worker.worker`). At a round hour a worker starts 50,000 of
these, so every line here is on the wave's path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import shardmap
from cluster import logs, metrics, tracing
from cluster.backoff import backoff
from cluster.clock import Clock
from cluster.config import Settings
from cluster.model import ClaimedJob, JobResult, Outcome, RevokeReplacedParams
from cluster.store.contracts.claims import JobClaims
from cluster.targets import FireResult, Target
from cluster.worker.completer import Completer, Fired
from cluster.worker.firings import FiringMetrics
from cluster.worker.inflight import InFlight, log_fields

__all__ = ["JobRunner"]

# The worker's logger: a firing's log lines keep the name they always had.
log = logging.getLogger("cluster.worker.worker")


def _cron_label(job: ClaimedJob) -> str:
    return metrics.cron_label(shardmap.encode_id("cron", job.cron_id)) if job.cron_id else "-"


def _job_log_fields(entry: InFlight) -> dict[str, Any]:
    return {**log_fields(entry), "owner": entry.job.owner}


class JobRunner:
    """Fires the jobs a worker holds, one task each. ``completers`` (by
    shard) is set by the worker once its shards' completers exist."""

    def __init__(
        self,
        settings: Settings,
        store: JobClaims,
        targets: dict[str, Target],
        clock: Clock,
        firing_metrics: FiringMetrics,
        worker_id: str,
        rand: Callable[[], float] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.targets = targets
        self.clock = clock
        self._metrics = firing_metrics
        self.worker_id = worker_id
        self._rand = rand
        self.completers: dict[int, Completer] = {}
        # Told of a target's 429/503 with Retry-After (the job, the seconds).
        self.on_back_pressure: Callable[[ClaimedJob, float], None] | None = None

    async def run(self, entry: InFlight) -> None:
        """Start ``entry``'s job (the wheel calls this at its instant) and
        queue its outcome with its shard's completer."""
        completer = self.completers[entry.shard]
        # Each job runs in its own task, with its own copy of the log context:
        # every line written while it fires (the target, the address policy,
        # the HTTP client) says which job, attempt and owner it was about.
        logs.bind_subject(_job_log_fields, entry)
        try:
            # The one reading of the clock a start takes (see _fire).
            now = self.clock.timestamp()
            lateness = now - entry.due
            # Released from the wheel up to a tick early, or claimed just
            # before its moment (or its place in its key's rate): wait out
            # the rest with the lease held.
            if lateness < 0 or entry.not_before > now:
                await asyncio.sleep(max(-lateness, entry.not_before - now))
                fired = await self._fire(entry)
            else:
                fired = await self._fire(entry, now, lateness)
            if fired is not None and not entry.lost:
                completer.put_fired(fired)
        except Exception:  # never let one job's bug leave it in flight forever
            log.exception("job task failed", extra=log_fields(entry))
            completer.put_fired(
                (entry, FireResult.retry("worker error"), self.clock.timestamp(), 0.0)
            )
        finally:
            # The task's context holds the entry, and the entry its task: a
            # cycle per job that only a full collection freed (500,000
            # objects, 190 ms, 3 s into a 100,000-job wave). Unbound, the
            # job's objects go by reference counting.
            logs.unbind_subject()

    async def _fire(
        self, entry: InFlight, started: float | None = None, lateness: float = 0.0
    ) -> Fired | None:
        """Fire ``entry``'s job. ``started`` (POSIX seconds) and ``lateness``:
        the clock as the caller has just read it; read here when not given.

        At a round hour each of a worker's 50,000 starts is lateness of the
        starts after it, so a start does only what firing needs: one reading
        of the clock as a float (a datetime with its zone was 0.5-0.8 us,
        and two were read), and its outcome queued as the firing left it.
        The :class:`JobResult` (the outcome, a retry's backoff, the start
        as a datetime) is made when the completer takes its batch, after
        the instant has started."""
        job = entry.job
        shard = entry.shard
        if entry.lost:
            return None
        if started is None:
            started = self.clock.timestamp()
            lateness = started - entry.due
        if job.deadline_at is not None and started > job.deadline_at.timestamp():
            # A cron occurrence that can no longer start in time is dropped
            # and counted, not fired late.
            metrics.CRON_MISSED.labels(_cron_label(job), "starting_deadline").inc()
            return (entry, FireResult.skip("starting deadline passed"), started, lateness)
        if job.concurrency == "REPLACE" and job.cron_id is not None:
            await self.store.revoke_replaced(shard, RevokeReplacedParams(job.cron_id, job.id))
        kind = job.target_kind
        self._metrics.note_start(shard, kind, lateness)
        entry.fired = True
        target = self.targets.get(kind)
        called = time.perf_counter()
        if target is None:
            result = FireResult.permanent(f"no target of kind {kind!r} here")
        else:
            try:
                if tracing.ENABLED:
                    result = await self._fire_traced(target, entry, lateness)
                elif getattr(target, "enforces_timeout", False):
                    # The target bounds its own wait; a second timer per
                    # firing would only cost time at the round hour.
                    result = await target.fire(job, entry.job_id, float(job.timeout_seconds))
                else:
                    async with asyncio.timeout(job.timeout_seconds):
                        result = await target.fire(job, entry.job_id, float(job.timeout_seconds))
            except TimeoutError:
                result = FireResult.retry(f"timed out after {job.timeout_seconds} s")
            except Exception as exc:  # a target bug must not kill the worker
                log.exception("target raised", extra=log_fields(entry))
                result = FireResult.retry(f"{type(exc).__name__}: {exc}")
        self._metrics.note_fired(job, result, time.perf_counter() - called)
        if result.retry_after is not None and self.on_back_pressure is not None:
            self.on_back_pressure(job, result.retry_after)
        return (entry, result, started, lateness)

    async def _fire_traced(self, target: Target, entry: InFlight, lateness: float) -> FireResult:
        """The call as a span, the child of the job's create when it has one
        (cluster/tracing.py); the target sends this span's traceparent."""
        job = entry.job
        with tracing.span(
            f"fire {job.target_kind}",
            kind="client",
            parent=tracing.traceparent_of(job.target),
            attributes={"vakit.job_id": entry.job_id, "vakit.shard": entry.shard,
                        "vakit.attempt": job.attempt, "vakit.lateness_seconds": lateness},
        ) as span:  # fmt: skip
            async with asyncio.timeout(job.timeout_seconds):
                result = await target.fire(job, entry.job_id, float(job.timeout_seconds))
            span.set_attribute("vakit.result", "ok" if result.ok else (result.error or "error"))
            return result

    def result_for(
        self, entry: InFlight, result: FireResult, started: float, lateness: float
    ) -> JobResult:
        """A firing's outcome as the completer writes it (``started``: POSIX seconds)."""
        job = entry.job
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
        # Positional: a named tuple made with keywords costs half as much again.
        return JobResult(
            job.lease,
            outcome,
            self.worker_id,
            datetime.fromtimestamp(started, UTC),
            lateness,
            result.error,
            delay,
        )
