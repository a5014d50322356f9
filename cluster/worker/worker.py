"""The worker: claim due jobs, fire their targets, record the outcome.

Per owned shard, a claim loop takes a batch of due jobs in one short
transaction (``FOR UPDATE SKIP LOCKED``) and starts one task per job; the
firing happens outside any transaction. A job claimed ahead of its time waits
in the timing wheel (:mod:`cluster.worker.wheel`); a wave seen coming is
preloaded within a memory budget (:mod:`cluster.worker.preload`). Outcomes go
to a per-shard completer (:mod:`cluster.worker.completer`) that writes them
in batches, each row fenced by its attempt. A heartbeat loop extends the
leases of long jobs; a job whose heartbeat or completion matches no row was
lost (its lease expired and someone else has it): the worker drops it, writes
nothing and counts it.

Every loop has a ``run_once`` that tests call directly.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import shardmap
from cluster import metrics
from cluster.clock import Clock, SystemClock
from cluster.config import Settings
from cluster.coordination.base import Coordinator
from cluster.errors import ShardUnavailable
from cluster.model import (
    AdmittedJob,
    ClaimedJob,
    ClaimParams,
    JobResult,
    ReleaseParams,
    WorkerBeatParams,
)
from cluster.store.contracts.claims import JobClaims
from cluster.targets import Target
from cluster.worker.admission import LimitBook
from cluster.worker.completer import Completer
from cluster.worker.firings import FiringMetrics
from cluster.worker.heartbeat import Heartbeat
from cluster.worker.inflight import InFlight, log_fields
from cluster.worker.limits import parse_limits, target_key
from cluster.worker.preload import PRELOAD_BATCH, Preloader, budget_jobs, wave_threshold
from cluster.worker.runner import JobRunner
from cluster.worker.wheel import TICK, TimingWheel
from shardmap import SlotMap

__all__ = ["InFlight", "Worker", "default_worker_id"]

# Most held jobs started in one pass of the event loop. A worker holding
# 500,000 jobs due at one instant would otherwise not answer anything (its
# /metrics, its health checks, its completions) for about 5 s; in slices it
# gets back to the loop every few tens of milliseconds.
_SLICE = 5_000
# Seconds before an outcome refused by a shard whose slot is moving is tried again.
_MOVING_RETRY = 0.2
# How long after its lease an outcome refused by a moving slot is still tried:
# heartbeats are refused too while the slot is fenced, and the move gives a
# moved RUNNING row a lease of a minute (store/postgres/moves.py); the write
# is fenced by its attempt whenever it lands, so trying late is harmless.
_MOVING_PATIENCE = timedelta(seconds=60)

log = logging.getLogger(__name__)


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass
class _ShardState:
    inflight: dict[uuid.UUID, InFlight]  # shared with the completer, which forgets written jobs
    completer: Completer
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class Worker:
    def __init__(
        self,
        settings: Settings,
        store: JobClaims,
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
        # Limits that hold across the cluster (issue 44): the limited keys'
        # jobs are claimed through their shard's share, the others as ever.
        self.limits = LimitBook(parse_limits(settings.target_limits), store)
        self._capacity = asyncio.Event()
        self._stopping = asyncio.Event()
        self._stop_deadline = float("inf")
        # Metrics of firings are recorded after the firings of the same
        # instant have started, so the wheel and they know each other.
        self.wheel: TimingWheel
        self._metrics = FiringMetrics(lambda: self.wheel.starting)
        self.runner = JobRunner(
            settings, store, targets, self.clock, self._metrics, self.worker_id, rand
        )
        self.runner.on_back_pressure = self._back_pressure
        self.wheel = TimingWheel(self.runner.run, self._stopping, self._metrics.soon, _SLICE)
        self._shards = {i: self._shard_state(i) for i in range(store.shard_count)}
        self.slots = SlotMap.modulo(store.shard_count)
        self.runner.completers = {i: s.completer for i, s in self._shards.items()}
        self._inflights = {i: s.inflight for i, s in self._shards.items()}
        self.heartbeat = Heartbeat(
            store,
            self.clock,
            self._inflights,
            lease_seconds=settings.lease_seconds,
            grace_seconds=settings.lease_grace_seconds,
            every=settings.heartbeat_every,
            on_lost=self._capacity.set,
        )
        # Knobs an operator set win over what the worker works out itself.
        explicit = settings.model_fields_set
        self._inflight_is_total = "max_inflight" in explicit
        self._budget = budget_jobs(settings.preload_memory_bytes)
        # A regular claim's size per shard: claim_batch, doubled after each
        # claim that came back full (a backlog: more is due than one claim
        # takes) up to a preloading claim's size, and back at the first claim
        # that is not. A statement costs the shard a commit and a round trip
        # whatever its size; at 100 rows that was a third of a wave's tail.
        # An operator's claim_batch is kept as given.
        self._grow_claims = "claim_batch" not in explicit
        self._claim_size: dict[int, int] = {}
        self.preloader = Preloader(
            store,
            self.worker_id,
            self.clock,
            lease_seconds=settings.lease_seconds,
            grace_seconds=settings.lease_grace_seconds,
            batch=settings.claim_batch if "claim_batch" in explicit else PRELOAD_BATCH,
            pause=settings.poll_interval,
            take=self._take_preloaded,
        )
        self.polling = asyncio.Event()  # set once every claim loop has polled once
        self._polled: set[int] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()

    def _shard_state(self, shard: int) -> _ShardState:
        inflight: dict[uuid.UUID, InFlight] = {}
        completer = Completer(
            shard,
            self.store,
            inflight,
            batch=self.settings.complete_batch,
            linger=self.settings.complete_linger,
            started=self.wheel.all_started,
            give_up=self._past_stop_deadline,
            settle=self.runner.result_for,
            on_refused=functools.partial(self._refused, shard),
            on_written=self._written,
            owners=frozenset(self.settings.api_tokens.values()),
        )
        return _ShardState(inflight, completer)

    # -- state ---------------------------------------------------------------

    @property
    def inflight_count(self) -> int:
        return sum(len(s.inflight) for s in self._shards.values())

    @property
    def preloaded_count(self) -> int:
        """Preloaded jobs held now, waiting for their instant."""
        return self.wheel.preloaded

    def inflight(self, shard: int) -> dict[uuid.UUID, InFlight]:
        return self._shards[shard].inflight

    def _regular_room(self) -> int:
        """Room for regular claims: max_inflight bounds the jobs claimed at
        (or just before) their time; preloaded ones have their own budget,
        unless max_inflight was set, which then bounds everything."""
        held = 0 if self._inflight_is_total else self.wheel.preloaded
        return self.settings.max_inflight - (self.inflight_count - held)

    def _preload_room(self) -> int:
        room = self._budget - self.wheel.preloaded
        if self._inflight_is_total:
            room = min(room, self.settings.max_inflight - self.inflight_count)
        return room

    # -- claim -------------------------------------------------------------------

    async def run_once(self, shard: int) -> int:
        """Claim one batch on ``shard`` and start firing it; returns the count."""
        room = self._regular_room()
        if room <= 0:
            return 0
        limits = await self.limits.refresh(shard)
        admitted: list[AdmittedJob] = []
        if limits:
            # The limited keys first: what their shares admit is small (a
            # key's concurrency or a horizon of its rate), and a backlog of
            # unlimited jobs must not hold them back from their rate.
            admitted = await self.limits.claim(
                shard,
                limits,
                worker_id=self.worker_id,
                room=min(room, self.settings.claim_batch),
                lease_seconds=self.settings.lease_seconds,
                grace_seconds=self.settings.lease_grace_seconds,
                # Admitted jobs start within this much of their claim: a
                # claim every poll interval, each covering two, leaves no
                # gap in a key's rate; a job admitted is RUNNING (not
                # cancellable) only that long before it starts.
                horizon_seconds=2 * self.settings.poll_interval,
            )
            self._take_admitted(shard, admitted)
            room -= len(admitted)
            if room <= 0:
                return len(admitted)
        base = self.settings.claim_batch
        size = self._claim_size.get(shard, base)
        limit = min(size, room)
        jobs = await self.store.claim_jobs(
            shard,
            ClaimParams(
                worker_id=self.worker_id,
                limit=limit,
                lease_seconds=self.settings.lease_seconds,
                grace_seconds=self.settings.lease_grace_seconds,
                prefetch_seconds=self.settings.prefetch_seconds,
                limited=tuple(limits),
            ),
        )
        self._take(shard, jobs, preloaded=False)
        if self._grow_claims:
            full = len(jobs) >= limit
            self._claim_size[shard] = min(max(size, base) * 2, PRELOAD_BATCH) if full else base
        return len(jobs) + len(admitted)

    async def preload_once(self, shard: int) -> int:
        """Look ahead on ``shard`` and preload one round of this worker's
        share of a coming wave; returns how many jobs were claimed."""
        if not self._budget:
            return 0
        shards = len(self.coordinator.owned_shards()) or 1
        return await self.preloader.run_once(
            shard,
            room=self._preload_room(),
            threshold=wave_threshold(self.settings.max_inflight, shards),
            limited=tuple(self.limits.in_force(shard)),
        )

    def _take_preloaded(self, shard: int, jobs: list[ClaimedJob]) -> None:
        self._take(shard, jobs, preloaded=True)

    def _take_admitted(self, shard: int, admitted: list[AdmittedJob]) -> None:
        """Jobs a limit admitted: in flight, each starting at its place in
        its key's rate (or its run_at, if later)."""
        if not admitted:
            return
        self._take(shard, [a.job for a in admitted], preloaded=False)
        inflight = self._shards[shard].inflight
        for job, start in admitted:
            entry = inflight.get(job.id)
            if entry is not None:
                entry.not_before = start.timestamp()

    def _back_pressure(self, job: ClaimedJob, seconds: float) -> None:
        """A target asked for ``seconds`` of peace: its key, when limited
        anywhere, is paused for the whole cluster that long."""
        key = target_key(job.target)
        if key in self.limits.configured or any(
            key in self.limits.in_force(s) for s in self._shards
        ):
            until = self.clock.now() + timedelta(seconds=seconds)
            task = asyncio.create_task(self.limits.slow(key, until), name=f"slow-{key}")
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _written(self) -> None:
        """Outcomes written: room to claim again, and, when a limit is in
        force, room in a key's share (its running jobs are fewer)."""
        self._capacity.set()
        if self.limits.configured or self.limits.any_in_force():
            self._wake_all()

    def _take(self, shard: int, jobs: list[ClaimedJob], *, preloaded: bool) -> None:
        """Claimed jobs become in flight: held in the wheel until their
        run_at, or started now."""
        if not jobs:
            return
        state = self._shards[shard]
        # One reading of both clocks for the batch: jobs due at the same
        # instant land in the same tick, however long the loop below takes.
        now = self.clock.now()
        base = asyncio.get_running_loop().time()
        for job in jobs:
            entry = InFlight(
                job, shard, job.lease_until, shardmap.encode_id("job", job.id), preloaded=preloaded
            )
            state.inflight[job.id] = entry
            delay = (job.run_at - now).total_seconds()
            if delay > TICK:
                self.wheel.hold(entry, base + delay)
            else:
                entry.task = asyncio.create_task(self.runner.run(entry), name=entry.job_id)
        metrics.CLAIMED.labels(str(shard)).inc(len(jobs))
        metrics.INFLIGHT.labels(str(shard)).set(len(state.inflight))

    async def _claim_loop(self, shard: int) -> None:
        delay = self.settings.poll_interval
        while not self._stopping.is_set():
            claimed = preloaded = 0
            if shard in self.coordinator.owned_shards():
                try:
                    claimed = await self.run_once(shard)
                    preloaded = await self.preload_once(shard)
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
            if claimed >= self.settings.claim_batch or preloaded:
                continue  # more may be due, or more of a wave left: again without waiting
            if self._regular_room() <= 0:
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

    # -- complete ------------------------------------------------------------------

    async def flush_once(self, shard: int, wait: bool = True) -> int:
        """Write one batch of outcomes for ``shard``; returns how many were written."""
        return await self._shards[shard].completer.flush_once(wait)

    def _past_stop_deadline(self) -> bool:
        return self._stopping.is_set() and time.monotonic() > self._stop_deadline

    # -- heartbeat -------------------------------------------------------------------

    async def heartbeat_once(self, shard: int) -> int:
        """Extend the leases that run out soon; returns how many were lost."""
        return await self.heartbeat.run_once(shard)

    async def _heartbeat_loop(self, shard: int) -> None:
        # One loop per shard: a shard whose link hangs delays only its own
        # beats, never the leases held on the others.
        while not self._stopping.is_set():
            await self.heartbeat.beat_shard(shard)
            await self._sleep(self.settings.heartbeat_every)

    async def _beat_loop(self) -> None:
        """Tell each owned shard we poll it (readiness, `vakit status`, and
        the preloaders of the other workers, which split a wave by it)."""
        while not self._stopping.is_set():
            # All at once: one shard that answers nothing (frozen) holds its
            # own beat for the store's whole bound, not the others'.
            shards = sorted(self.coordinator.owned_shards())
            await asyncio.gather(*(self._beat(shard) for shard in shards))
            await self._sleep(5.0)

    async def _beat(self, shard: int) -> None:
        try:
            await self.store.worker_beat(shard, WorkerBeatParams(self.worker_id))
        except Exception as exc:  # readiness only; never worth dying for
            log.debug("beat failed: %s", exc, extra={"shard": shard})

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
            self._start_shard(shard)
        self._tasks.append(asyncio.create_task(self._beat_loop(), name="beat"))

    def _start_shard(self, shard: int) -> None:
        state = self._shards[shard]
        self._tasks.append(asyncio.create_task(self._claim_loop(shard), name=f"claim-{shard}"))
        self._tasks.append(asyncio.create_task(state.completer.run(), name=f"complete-{shard}"))
        self._tasks.append(
            asyncio.create_task(self._heartbeat_loop(shard), name=f"heartbeat-{shard}")
        )

    def route_by(self, slots: SlotMap) -> None:
        """The slot map to find a job's shard by now: the jobs this worker
        holds in slots that moved are held under their new shard, so their
        heartbeats and outcomes are written where their rows went."""
        before, self.slots = self.slots, slots
        moved = {s for s in range(len(slots.owners)) if slots.owners[s] != before.owners[s]}
        if not moved:
            return
        for shard, state in list(self._shards.items()):
            for jid, entry in list(state.inflight.items()):
                owner = slots.shard_of(jid)
                if owner != shard and owner in self._shards:
                    del state.inflight[jid]
                    entry.shard = owner
                    self._shards[owner].inflight[jid] = entry

    def _refused(self, shard: int, result: JobResult, entry: InFlight | None) -> None:
        """An outcome ``shard`` refused (the job's slot is moving off it):
        written by the new owner once the map names it, tried again here
        meanwhile (a cancelled move serves the slot here again). Given up
        once the lease is over: the new owner's reaper runs the job again."""
        jid = result.lease.id
        if entry is not None and entry.lease_until < self.clock.now() - _MOVING_PATIENCE:
            log.warning(
                "completion given up: the slot moved and the lease ran out", extra=log_fields(entry)
            )
            return
        owner = self.slots.shard_of(jid)
        if owner not in self._shards:
            owner = shard  # a shard this process has no pool for yet
        if entry is not None:
            entry.shard = owner
            self._shards[owner].inflight[jid] = entry
        if owner == shard:
            asyncio.get_running_loop().call_later(
                _MOVING_RETRY, self._shards[owner].completer.put, result
            )
        else:
            self._shards[owner].completer.put(result)

    def add_shard(self, shard: int) -> None:
        """A shard added to the running cluster (resharding): its claim,
        completion and heartbeat loops, which work once the coordinator
        gives this worker the shard."""
        if shard in self._shards:
            return
        self._shards[shard] = self._shard_state(shard)
        self.runner.completers[shard] = self._shards[shard].completer
        self._inflights[shard] = self._shards[shard].inflight
        if self._tasks:
            self._start_shard(shard)

    async def stop(self, grace: float | None = None) -> None:
        """Graceful stop: no new claims; in-flight jobs finish within ``grace``
        seconds, the rest are released (never-fired ones with a refund), and
        every outcome produced is written before the completers end."""
        grace = self.settings.stop_grace_seconds if grace is None else grace
        self._stop_deadline = time.monotonic() + grace + self.settings.connect_timeout
        self._stopping.set()
        # Held (preloaded) jobs are not started any more: they are released.
        self.wheel.clear()
        # Nor are jobs whose task has not called its target yet (one waiting
        # out a target's limit, or the last moment before its due time): a
        # slot freed during the grace must not start a firing the grace
        # then cuts off, and such a job goes back with its attempt refunded.
        entries = [e for s in self._shards.values() for e in s.inflight.values()]
        waiting = [
            e.task for e in entries if e.task is not None and not e.fired and not e.task.done()
        ]
        for task in waiting:
            task.cancel()
        pending = [e.task for e in entries if e.task is not None and not e.task.done()]
        if pending:
            await asyncio.wait(pending, timeout=grace)
        # Release what did not finish in time. Every shard's tasks are
        # cancelled before any is awaited: a firing that ends on one shard
        # frees its target's slot, and no job of another shard may take it.
        # A task cancelled above left no outcome: its job is released too.
        unfinished = {
            shard: [
                e
                for e in state.inflight.values()
                if e.task is None or not e.task.done() or e.task.cancelled()
            ]
            for shard, state in self._shards.items()
        }
        tasks = [e.task for held in unfinished.values() for e in held if e.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for shard, held in unfinished.items():
            if not held:
                continue
            try:
                await self.store.release_jobs(
                    shard,
                    ReleaseParams(
                        tuple(e.job.lease for e in held),
                        tuple(not e.fired for e in held),
                        self.worker_id,
                    ),
                )
            except Exception as exc:
                log.warning("release failed (leases will expire): %s", exc, extra={"shard": shard})
            inflight = self._shards[shard].inflight
            for entry in held:
                inflight.pop(entry.job.id, None)
        # Let each completer write everything queued so far, then end.
        for state in self._shards.values():
            state.completer.drain()
        completers = [t for t in self._tasks if t.get_name().startswith("complete-")]
        others = [t for t in self._tasks if t not in completers]
        for task in others:
            task.cancel()
        if completers:
            budget = max(1.0, self._stop_deadline - time.monotonic() + 5.0)
            _done, late = await asyncio.wait(completers, timeout=budget)
            for task in late:
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
