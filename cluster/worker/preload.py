"""Preloading: a worker sees a wave coming and claims its share ahead of time.

At a round hour tens of thousands of jobs fall due at one instant. Claimed
at their moment, they start at the drain rate: seconds late. Claimed ahead
and held in the timing wheel, they all start at the instant. How far ahead
and how many used to be knobs (``prefetch_seconds``, ``max_inflight``) that
only an operator who knew a wave was coming would turn.

Here the worker looks: every poll, a cheap query per shard
(:meth:`~cluster.store.contracts.claims.JobClaims.due_ahead`) says how many jobs fall due in
each of the next :data:`LOOKAHEAD_SECONDS`. A second holding more jobs than
the regular claims can start on time is a wave; the worker claims its share
of it (the jobs due from the wave's first second to its last, split evenly
among the workers that poll the shard) within a memory budget, the one
setting ``preload_memory_bytes``, converted into a job count with the
measured cost of one held job (:data:`JOB_BYTES`). No wave, nothing extra is
held: jobs before and between waves stay SCHEDULED (cancellable) and are
claimed at their time.

A preloaded job's lease runs from its ``run_at`` (the claim sets it so), so
a held job needs no heartbeat while it waits, and a worker killed while
holding a wave gives the jobs back when their leases run out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cluster.clock import Clock
from cluster.model import ClaimedJob, ClaimParams, DueAheadParams, DueSecond, WorkersSeenParams
from cluster.store.contracts.claims import JobClaims

__all__ = [
    "JOB_BYTES",
    "LOOKAHEAD_SECONDS",
    "PreloadPlan",
    "Preloader",
    "budget_jobs",
    "plan_preload",
    "wave_threshold",
]

# Memory one preloaded job costs a worker at its peak, bytes: held (claimed
# row, entry, wheel slot: 650 B of RSS) and then started at the instant
# (task, outcome waiting for its batch: 1,760 B in all for a NOOP job),
# measured as RSS growth of a worker holding and starting 50,000-100,000
# NOOP jobs of the wave benchmark's shape. An HTTP firing's peak is higher:
# most of a wave's firings wait for one of the pool's connections, each
# with its firing's coroutine frames (2,800-3,100 B of Python allocations
# in all; on aiohttp it was ~10 KB, and a worker holding 50,000 grew to
# 650 MB). The budget counts every job at the dearer target's peak, so it
# holds whatever the target. ``tests/unit/test_preload.py`` checks the
# Python allocations of a held and started job (NOOP, and HTTP waiting for
# a connection) stay under it.
JOB_BYTES = 3_584
# How far ahead a worker looks for a wave. Long enough to claim a full
# budget before its instant (a worker claims 20,000-60,000 jobs/s); short
# enough that wave jobs are not held (RUNNING, no longer cancellable) for
# long before their time.
LOOKAHEAD_SECONDS = 10.0
# Jobs per preloading claim when claim_batch is not set: one statement of a
# thousand rows costs the database less per job than ten of a hundred.
PRELOAD_BATCH = 1_000
# Most jobs claimed in one round before looking again. Each round takes the
# worker's share of what is still unclaimed; workers that poll a shard
# together alternate their rounds and end up with even shares.
ROUND_JOBS = 5_000
# How long the number of workers polling a shard is trusted.
_PEERS_TTL = timedelta(seconds=1)

log = logging.getLogger(__name__)


def budget_jobs(memory_bytes: int) -> int:
    """How many preloaded jobs ``memory_bytes`` holds."""
    return max(0, memory_bytes // JOB_BYTES)


def wave_threshold(max_inflight: int, shards: int) -> int:
    """Jobs due in one second, per worker and shard, beyond which the regular
    claims cannot start them on time: they take at most ``max_inflight``
    jobs at once over all the worker's shards; half of that is left for
    whatever else is due."""
    return max(1, max_inflight // (2 * max(1, shards)))


@dataclass(frozen=True)
class PreloadPlan:
    window: tuple[datetime, datetime]  # claim jobs with window[0] <= run_at < window[1]
    jobs: int  # this worker's share, for this round


def plan_preload(
    forecast: Sequence[DueSecond],
    *,
    workers: int,
    threshold: int,
    room: int,
    most: int = ROUND_JOBS,
) -> PreloadPlan | None:
    """What to preload from ``forecast`` (jobs due per upcoming second on one
    shard): None without a wave. A wave is a second whose per-worker share
    exceeds ``threshold``; the plan covers the jobs from the first wave
    second to the end of the last, this worker's share of them (the
    ``workers`` polling the shard split them evenly), at most ``room`` (the
    budget left) and ``most`` (one round)."""
    waves = [d for d in forecast if d.jobs > threshold * workers]
    if not waves or room <= 0:
        return None
    first, last = waves[0].at, waves[-1].at + timedelta(seconds=1)
    ahead = sum(d.jobs for d in forecast if first <= d.at < last)
    share = -(-ahead // max(1, workers))
    return PreloadPlan((first, last), min(share, room, most))


class Preloader:
    """One worker's preloading, shard by shard: :meth:`run_once` looks ahead
    and claims one round of its share of a wave, handing each claimed batch
    to ``take``."""

    def __init__(
        self,
        store: JobClaims,
        worker_id: str,
        clock: Clock,
        *,
        lease_seconds: float,
        grace_seconds: float,
        batch: int,
        pause: float,
        take: Callable[[int, list[ClaimedJob]], None],
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.clock = clock
        self._lease = lease_seconds
        self._grace = grace_seconds
        self._batch = batch
        self._pause = timedelta(seconds=pause)
        self._take = take
        self.round_jobs = ROUND_JOBS
        self._next_look: dict[int, datetime] = {}
        self._peers: dict[int, tuple[datetime, int]] = {}

    async def run_once(
        self, shard: int, *, room: int, threshold: int, limited: tuple[str, ...] = ()
    ) -> int:
        """Look ahead on ``shard`` (at most once per pause, unless the last
        round claimed something) and preload one round; returns how many
        jobs were claimed. The jobs of ``limited`` keys are left alone:
        they are admitted at their time, by their limit."""
        now = self.clock.now()
        if room <= 0 or now < self._next_look.get(shard, now):
            return 0
        self._next_look[shard] = now + self._pause
        workers = self._peers.get(shard, (now, 1))[1]
        # Enough jobs counted to see a wave of any worker count near this
        # one, and a round's worth beyond it; never the whole of a large one.
        limit = (self.round_jobs + threshold) * (workers + 1)
        forecast = await self.store.due_ahead(shard, DueAheadParams(LOOKAHEAD_SECONDS, limit))
        plan = plan_preload(
            forecast, workers=workers, threshold=threshold, room=room, most=self.round_jobs
        )
        if plan is None:
            return 0
        # A wave: split it by the workers polling the shard now, not by the
        # count of a while ago (workers start together before a benchmark's
        # wave, and stop or die in the middle of one).
        seen_at, _ = self._peers.get(shard, (now - _PEERS_TTL, 1))
        if now - seen_at >= _PEERS_TTL:
            workers = await self._count_workers(shard, now)
            plan = plan_preload(
                forecast, workers=workers, threshold=threshold, room=room, most=self.round_jobs
            )
            if plan is None:
                return 0
        claimed = await self._claim(shard, plan, limited)
        log.debug(
            "preloaded %d jobs due from %s (%d workers)",
            claimed,
            plan.window[0].isoformat(),
            workers,
            extra={"shard": shard},
        )
        if claimed:
            self._next_look[shard] = now  # more of the wave may be left: look again at once
        return claimed

    async def _count_workers(self, shard: int, now: datetime) -> int:
        seen = set(await self.store.workers_seen(shard, WorkersSeenParams()))
        seen.add(self.worker_id)
        self._peers[shard] = (now, len(seen))
        return len(seen)

    async def _claim(self, shard: int, plan: PreloadPlan, limited: tuple[str, ...]) -> int:
        claimed = 0
        while claimed < plan.jobs:
            limit = min(self._batch, plan.jobs - claimed)
            jobs = await self.store.claim_jobs(
                shard,
                ClaimParams(
                    worker_id=self.worker_id,
                    limit=limit,
                    lease_seconds=self._lease,
                    grace_seconds=self._grace,
                    window=plan.window,
                    limited=limited,
                ),
            )
            if jobs:
                self._take(shard, jobs)
            claimed += len(jobs)
            if len(jobs) < limit:
                break
        return claimed
