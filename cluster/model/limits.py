"""Limits on a target key that hold across the cluster (issue 44,
docs/design/limits.md): their record, their share on one shard, and the rate
arithmetic a claim does (GCRA), all pure.

A limit on a key (an HTTP host, ``kafka:<topic>``) is split evenly between
the shards: a shard admits at most its share of the concurrency (counted
as its own RUNNING rows of the key, so a dead holder's permits come back
when their lease ends) and its share of the rate (its own GCRA state, in
the shard). Jobs are spread over the shards by a hash, so even shares
are what each shard's demand is; and the state of a shard's share lives
with the jobs it governs: a shard that is lost takes its share with it,
never to another worker, so nothing overshoots however workers or shards
fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from cluster.model.jobs import ClaimedJob

__all__ = [
    "Admission",
    "AdmittedJob",
    "LimitSetting",
    "LimitedClaimParams",
    "SetLimitParams",
    "Share",
    "TargetLimit",
    "admit",
    "effective_concurrency",
    "parse_limit",
    "parse_limits",
    "shard_share",
]


@dataclass(frozen=True)
class TargetLimit:
    """A key's limit for the whole cluster: firings in flight at once, and
    firings per second with a burst (the most that may start together).
    None: not limited in that way."""

    concurrency: int | None
    rate: float | None
    burst: float | None = None

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.concurrency < 0:
            raise ValueError("concurrency must be >= 0")
        if self.rate is not None and self.rate <= 0:
            raise ValueError("rate must be > 0")
        if self.burst is not None and self.burst < 1:
            raise ValueError("burst must be >= 1")

    @property
    def limited(self) -> bool:
        return self.concurrency is not None or self.rate is not None

    @property
    def burst_or_default(self) -> float:
        """The burst when none is given: a fiftieth of a second's rate (at
        least 1), so any one second sees at most 2 % over the rate, with room
        left for a start the worker's event loop makes a little late."""
        if self.burst is not None:
            return self.burst
        return max(1.0, (self.rate or 0.0) / 50)

    def spelled(self) -> str:
        """As VAKIT_TARGET_LIMITS spells it: ``concurrency[/rate[/burst]]``."""
        conc = "" if self.concurrency is None else str(self.concurrency)
        if self.rate is None:
            return conc
        rate = f"{self.rate:g}"
        return f"{conc}/{rate}" + ("" if self.burst is None else f"/{self.burst:g}")


def parse_limit(key: str, value: str) -> TargetLimit:
    """``concurrency[/rate[/burst]]``, each part optional (``/200``: a rate only)."""
    parts = value.strip().split("/")
    if len(parts) > 3:
        raise ValueError(f"target limit {key}={value!r}: expected concurrency[/rate[/burst]]")
    conc, rate, burst = [*parts, "", ""][:3]
    try:
        return TargetLimit(
            concurrency=int(conc) if conc else None,
            rate=float(rate) if rate else None,
            burst=float(burst) if burst else None,
        )
    except ValueError as exc:
        raise ValueError(
            f"target limit {key}={value!r}: expected concurrency[/rate[/burst]]"
        ) from exc


def parse_limits(spec: dict[str, str]) -> dict[str, TargetLimit]:
    """VAKIT_TARGET_LIMITS as limits by key (keys are lower case)."""
    return {key.strip().lower(): parse_limit(key, value) for key, value in spec.items()}


@dataclass(frozen=True)
class Share:
    """One shard's share of a limit: ``concurrency`` firings of the key in
    flight on it, and one firing per ``interval`` seconds with
    ``tolerance`` seconds of burst (GCRA)."""

    concurrency: int | None
    interval: float | None
    tolerance: float


def shard_share(limit: TargetLimit, shards: int) -> Share:
    """``limit`` split evenly between ``shards`` shards.

    A concurrency smaller than the number of shards still gives each shard
    one firing in flight (the cluster then admits up to ``shards``): a
    share of zero would leave the key's jobs on some shards unfired for
    ever. ``vakit limits`` shows the effective figure."""
    shards = max(1, shards)
    conc = None
    if limit.concurrency is not None:
        conc = max(1, limit.concurrency // shards) if limit.concurrency else 0
    if limit.rate is None:
        return Share(conc, None, 0.0)
    interval = shards / limit.rate
    # The burst is split too; a shard's tolerance is the time its share of
    # the burst (beyond the one firing GCRA always allows) takes at its rate.
    burst = max(1.0, limit.burst_or_default / shards)
    return Share(conc, interval, (burst - 1) * interval)


def effective_concurrency(limit: TargetLimit, shards: int) -> int | None:
    share = shard_share(limit, shards).concurrency
    return None if share is None else share * max(1, shards)


@dataclass(frozen=True)
class Admission:
    """What one limited claim may take: ``count`` jobs, the i-th to start at
    ``starts[i]``; ``tat`` is the bucket's new state once ``taken`` jobs
    were (see :func:`admit`)."""

    count: int
    base: datetime
    interval: float | None
    tolerance: float

    def start(self, i: int, now: datetime) -> datetime:
        """When the i-th admitted job may start (GCRA: one per interval,
        ``tolerance`` of them early)."""
        if self.interval is None:
            return now
        return max(now, self.base + timedelta(seconds=i * self.interval - self.tolerance))

    def tat(self, taken: int) -> datetime:
        """The bucket's state after ``taken`` of the admitted jobs were claimed."""
        if self.interval is None:
            return self.base
        return self.base + timedelta(seconds=taken * self.interval)


def admit(
    share: Share, *, tat: datetime, now: datetime, running: int, horizon: float, most: int
) -> Admission:
    """How many of a key's due jobs a shard may start within ``horizon``
    seconds from ``now``: at most ``most``, at most its concurrency share
    less the ``running`` ones, and as many as its rate share lets start by
    ``now + horizon`` (each admitted job gets its own start time, so the
    firings are spread over the horizon, never bunched)."""
    count = most
    if share.concurrency is not None:
        count = min(count, share.concurrency - running)
    base = max(tat, now)
    if share.interval is not None:
        ahead = (now - base).total_seconds() + horizon + share.tolerance
        count = min(count, math.floor(ahead / share.interval + 1e-9) + 1 if ahead >= 0 else 0)
    return Admission(max(0, count), base, share.interval, share.tolerance)


@dataclass(frozen=True)
class LimitedClaimParams:
    """Claim a limited key's due jobs on one shard: the shard's bucket is
    locked, its RUNNING jobs of the key counted, and at most what
    :func:`admit` allows is claimed, each job with its start time."""

    worker_id: str
    key: str
    limit: TargetLimit
    shards: int  # how many shards the limit is split between
    most: int
    lease_seconds: float
    grace_seconds: float
    horizon_seconds: float
    now: datetime | None = None  # None: the database's now()


@dataclass(frozen=True)
class LimitSetting:
    """A limit an operator set at run time, as a shard holds it."""

    key: str
    limit: TargetLimit
    updated_at: datetime | None = None


@dataclass(frozen=True)
class SetLimitParams:
    """Set (``limit``) or drop (``limit=None``: back to the configuration)
    the run-time limit on ``key``. A limit with neither concurrency nor
    rate lifts the configured one."""

    key: str
    limit: TargetLimit | None


class AdmittedJob(NamedTuple):
    """A job a limited claim took, and the instant it may start at (its
    place in the key's rate)."""

    job: ClaimedJob
    start: datetime
