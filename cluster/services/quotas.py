"""Per-owner rate limits and quotas, answered with 429 and ``Retry-After``.

Four limits, each off at 0:

- **creates per second** (``owner_create_rate``, ``owner_create_burst``): a
  token bucket per owner; a job, a cron job or each item of a batch is one
  create. A batch needs as many tokens as it has items (a full bucket always
  admits one, so a batch larger than the burst is not refused for ever).
- **pending jobs** (``owner_max_pending_jobs``) and **cron jobs**
  (``owner_max_crons``): counted from the shards every
  ``quota_refresh_seconds`` in the background, never per request; between two
  counts this process adds what it created itself. A count that takes long
  spaces the next one out (at most a tenth of the time is spent counting).
- **manual triggers per cron** (``cron_triggers_per_minute``, by default one
  per ``cron_min_interval_seconds``, what the cron's own schedule may do): a
  token bucket per cron.

Everything is in this process's memory: with N API processes behind a load
balancer an owner may create up to N times the rate, and a quota may be
overshot by what the other processes created since their last count (at most
(N - 1) x rate x refresh interval). Set the rate to the share of one process.

The hot path (a create) costs a dict lookup, a clock read and some
arithmetic: no I/O, no lock (one event loop).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from cluster.config import Settings
from cluster.errors import Overloaded, VakitError
from cluster.model import OwnerCountsParams
from cluster.store.contracts.cron_intake import CronIntake
from cluster.store.contracts.insight import JobInsight

__all__ = ["OwnerLimits", "TokenBucket"]

log = logging.getLogger(__name__)
# Buckets kept before the full ones (as good as new) are dropped.
_PRUNE_AT = 10_000
_COUNT_SHARE = 10  # counting may take at most 1/10 of the time


class TokenBucket:
    """``rate`` tokens a second, at most ``capacity`` saved up; starts full.

    Pure state: the caller passes the time (``time.monotonic()``), so a test
    moves it by hand."""

    __slots__ = ("capacity", "rate", "stamp", "tokens")

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        if rate <= 0 or capacity < 1:
            raise ValueError("a bucket needs a positive rate and a capacity of at least 1")
        self.rate = rate
        self.capacity = float(capacity)
        self.tokens = float(capacity)
        self.stamp = now

    def take(self, n: int, now: float) -> float:
        """Take ``n`` tokens: 0.0 when admitted, else the seconds until
        ``n`` (at most a full bucket) will be there. A refusal takes nothing."""
        tokens = self.tokens + (now - self.stamp) * self.rate
        if tokens > self.capacity:
            tokens = self.capacity
        self.stamp = now
        need = n if n < self.capacity else self.capacity
        if tokens >= need:
            # More than a full bucket (a batch beyond the burst) leaves a
            # debt: the average rate holds whatever the batch sizes.
            self.tokens = tokens - n
            return 0.0
        self.tokens = tokens
        return (need - tokens) / self.rate

    def full(self, now: float) -> bool:
        """Refilled to capacity: the same as a new bucket, so it may be dropped."""
        return self.tokens + (now - self.stamp) * self.rate >= self.capacity


def _retry_after(seconds: float) -> int:
    return max(1, math.ceil(seconds))


class _Buckets:
    """A bucket per key, made on first use, the full ones dropped when many."""

    def __init__(self, rate: float, capacity: float, monotonic: Callable[[], float]) -> None:
        self.rate = rate
        self.capacity = capacity
        self.monotonic = monotonic
        self.buckets: dict[str, TokenBucket] = {}
        self.prune_at = _PRUNE_AT

    def take(self, key: str, n: int) -> float:
        now = self.monotonic()
        bucket = self.buckets.get(key)
        if bucket is None:
            if len(self.buckets) >= self.prune_at:
                self.buckets = {k: b for k, b in self.buckets.items() if not b.full(now)}
                # Many buckets in use at once: prune again only when doubled.
                self.prune_at = max(_PRUNE_AT, 2 * len(self.buckets))
            bucket = self.buckets[key] = TokenBucket(self.rate, self.capacity, now)
        return bucket.take(n, now)


class _Counted:
    """Rows per owner as of the last count, plus this process's own since.

    The local additions made while a count runs are kept apart until it
    lands (the count may or may not have seen them: counted twice rather
    than not at all)."""

    def __init__(self) -> None:
        self.counted: dict[str, int] = {}
        self.local: dict[str, int] = {}
        self.counting: dict[str, int] = {}

    def estimate(self, owner: str) -> int:
        return self.counted.get(owner, 0) + self.counting.get(owner, 0) + self.local.get(owner, 0)

    def add(self, owner: str, n: int) -> None:
        self.local[owner] = self.local.get(owner, 0) + n

    def start(self) -> None:
        for owner, n in self.local.items():
            self.counting[owner] = self.counting.get(owner, 0) + n
        self.local = {}

    def landed(self, counts: dict[str, int]) -> None:
        self.counted = counts
        self.counting = {}

    def failed(self) -> None:
        # The old count stands; what was added meanwhile still counts.
        for owner, n in self.counting.items():
            self.local[owner] = self.local.get(owner, 0) + n
        self.counting = {}


class OwnerLimits:
    """The four limits of one API process (see the module's docstring)."""

    def __init__(self, settings: Settings, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        rate, burst = settings.owner_create_rate, settings.owner_create_burst
        self.creates = _Buckets(rate, max(burst, 1), monotonic) if rate > 0 else None
        per_minute = settings.triggers_per_minute
        # The burst is what one minute allows (one by default): the cron's
        # minimum interval holds for manual runs too.
        self.triggers = (
            _Buckets(per_minute / 60.0, max(per_minute, 1.0), monotonic) if per_minute > 0 else None
        )
        self.max_pending = settings.owner_max_pending_jobs
        self.max_crons = settings.owner_max_crons
        self.refresh_seconds = settings.quota_refresh_seconds
        self.pending = _Counted()
        self.crons = _Counted()

    # -- the hot path --------------------------------------------------------------

    def admit_jobs(self, owner: str, n: int = 1) -> None:
        """Before creating ``n`` jobs: 429 when over the rate or the pending quota."""
        self._admit_creates(owner, n)
        if self.max_pending and self.pending.estimate(owner) + n > self.max_pending:
            raise Overloaded(
                f"owner {owner!r} has about {self.pending.estimate(owner)} pending jobs; "
                f"the quota is {self.max_pending} (owner_max_pending_jobs)",
                retry_after=_retry_after(self.refresh_seconds),
                limit="owner_max_pending_jobs",
            )

    def admit_crons(self, owner: str, n: int = 1) -> None:
        """Before defining ``n`` cron jobs: 429 when over the rate or the cron quota."""
        self._admit_creates(owner, n)
        if self.max_crons and self.crons.estimate(owner) + n > self.max_crons:
            raise Overloaded(
                f"owner {owner!r} has about {self.crons.estimate(owner)} cron jobs; "
                f"the quota is {self.max_crons} (owner_max_crons)",
                retry_after=_retry_after(self.refresh_seconds),
                limit="owner_max_crons",
            )

    def created_jobs(self, owner: str, n: int) -> None:
        if self.max_pending and n:
            self.pending.add(owner, n)

    def created_crons(self, owner: str, n: int) -> None:
        if self.max_crons and n:
            self.crons.add(owner, n)

    def admit_trigger(self, cron_key: str) -> None:
        """Before a manual trigger of the cron ``cron_key``: 429 when too soon."""
        if self.triggers is None:
            return
        wait = self.triggers.take(cron_key, 1)
        if wait:
            raise Overloaded(
                "this cron job was triggered by hand too often; its manual runs are "
                "limited like its schedule (cron_triggers_per_minute)",
                retry_after=_retry_after(wait),
                limit="cron_triggers_per_minute",
            )

    def _admit_creates(self, owner: str, n: int) -> None:
        if self.creates is None:
            return
        wait = self.creates.take(owner, n)
        if wait:
            raise Overloaded(
                f"owner {owner!r} creates faster than its limit of "
                f"{self.creates.rate:g}/s (owner_create_rate)",
                retry_after=_retry_after(wait),
                limit="owner_create_rate",
            )

    # -- the counts, in the background ---------------------------------------------

    async def refresh(self, store: JobInsight, crons: CronIntake) -> None:
        """Count pending jobs and cron jobs per owner on every shard, once.
        A shard that does not answer leaves the previous count standing."""
        params = OwnerCountsParams()
        for wanted, counted, count in (
            (self.max_pending, self.pending, store.pending_by_owner),
            (self.max_crons, self.crons, crons.crons_by_owner),
        ):
            if not wanted:
                continue
            counted.start()
            try:
                per_shard = await asyncio.gather(
                    *(count(shard, params) for shard in range(store.shard_count))
                )
            except VakitError as exc:
                counted.failed()
                log.warning("per-owner quota: counting failed, the last count stands: %s", exc)
                continue
            except asyncio.CancelledError:
                counted.failed()
                raise
            total: dict[str, int] = {}
            for counts in per_shard:
                for owner, n in counts.items():
                    total[owner] = total.get(owner, 0) + n
            counted.landed(total)

    async def run(self, store: JobInsight, crons: CronIntake, *, counted: bool = False) -> None:
        """Refresh the counts for as long as the API runs; ``counted``: a
        count has just landed, so the first one waits its turn."""
        if not (self.max_pending or self.max_crons):
            return
        if counted:
            await asyncio.sleep(self.refresh_seconds)
        while True:
            started = self.monotonic()
            try:
                await self.refresh(store, crons)
            except Exception:
                # A bug must not stop the counting for good: the quotas would
                # then only ever grow with this process's own creates.
                log.exception("per-owner quota: counting failed")
            took = self.monotonic() - started
            await asyncio.sleep(max(self.refresh_seconds, _COUNT_SHARE * took))
