"""What happened to a run's jobs, read back from the shards.

The database is the witness: ``job_history`` says how each job ended and
when, ``job_attempts`` when its first attempt started. Worker metrics are only
used to know when to look.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg

from benchmarks.sql import query
from benchmarks.stats import summarize

__all__ = ["Outcomes", "collect", "figures", "server_info"]

# The design's promise for the round-hour wave: every job started within 60 s.
ON_TIME_SECONDS = 60.0


@dataclass
class Outcomes:
    """One run's finished jobs (parallel lists, one entry per job) and the
    rows still pending in the hot table."""

    scheduled: list[float] = field(default_factory=list)
    started: list[float | None] = field(default_factory=list)
    finished: list[float] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    created: list[float] = field(default_factory=list)  # when each row was made
    statuses: Counter[str] = field(default_factory=Counter)
    pending: Counter[str] = field(default_factory=Counter)

    @property
    def finished_count(self) -> int:
        return len(self.finished)

    def counts(self) -> dict[str, int]:
        """Final states from the database: SUCCEEDED/FAILED/… plus what is
        still SCHEDULED or RUNNING."""
        return {**self.statuses, **self.pending}

    def lateness(self) -> list[float]:
        return [s - d for s, d in zip(self.started, self.scheduled, strict=True) if s is not None]

    def start_times(self) -> list[float]:
        return [s for s in self.started if s is not None]

    def scheduled_in(self, instants: set[float]) -> Outcomes:
        """The finished jobs scheduled for one of ``instants`` (epoch
        seconds); the status and pending counts are not per job, so they
        are left out."""
        keep = [sc in instants for sc in self.scheduled]
        out = Outcomes()
        for name in ("scheduled", "started", "finished", "attempts", "created"):
            values = getattr(self, name)
            setattr(out, name, [v for v, k in zip(values, keep, strict=True) if k])
        return out


def _collect_shard(dsn: str, owners: list[str]) -> Outcomes:
    out = Outcomes()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for status, n in conn.execute(query("owner_pending"), {"owners": owners}):
            out.pending[status] += n
        rows = conn.execute(query("owner_outcomes"), {"owners": owners}).fetchall()
    for scheduled, started, finished, status, attempts, created in rows:
        out.scheduled.append(scheduled)
        out.started.append(started)
        out.finished.append(finished)
        out.attempts.append(attempts)
        out.created.append(created)
        out.statuses[status] += 1
    return out


def collect(dsns: list[str], owners: str | Sequence[str]) -> Outcomes:
    """Every shard's view of the jobs of ``owners`` (one run's
    ``owner_service`` values), merged."""
    names = [owners] if isinstance(owners, str) else list(owners)
    with ThreadPoolExecutor(max_workers=len(dsns)) as pool:
        parts = list(pool.map(lambda dsn: _collect_shard(dsn, names), dsns))
    total = Outcomes()
    for part in parts:
        total.scheduled += part.scheduled
        total.started += part.started
        total.finished += part.finished
        total.attempts += part.attempts
        total.created += part.created
        total.statuses.update(part.statuses)
        total.pending.update(part.pending)
    return total


def figures(outcomes: Outcomes, expected: int, origin: float) -> dict[str, Any]:
    """The headline figures of a run of ``expected`` jobs whose clock starts
    at ``origin`` (epoch seconds: the wave's T, or the first runAt).

    A job that never started, or never finished, counts against
    ``started_within_60s``: the share is of the jobs asked for, not of those
    that made it.
    """
    lateness = outcomes.lateness()
    on_time = sum(1 for late in lateness if late <= ON_TIME_SECONDS)
    starts = outcomes.start_times()
    last_finish = max(outcomes.finished, default=None)
    last_start = max(starts, default=None)
    drain = (
        outcomes.finished_count / (last_finish - origin)
        if last_finish is not None and last_finish > origin
        else None
    )
    start_rate = (
        len(starts) / (last_start - origin)
        if last_start is not None and last_start > origin
        else None
    )
    return {
        "started_within_60s": on_time / expected if expected else None,
        "lateness_seconds": summarize(lateness),
        "drain_jobs_per_s": drain,
        "start_jobs_per_s": start_rate,
        "drain_seconds": (last_finish - origin) if last_finish is not None else None,
        "retried_jobs": sum(1 for a in outcomes.attempts if a > 1),
    }


def server_info(dsn: str) -> dict[str, Any]:
    """The PostgreSQL version and the settings that shape a benchmark."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query("server_version")).fetchone()
        settings: dict[str, str] = dict(conn.execute(query("server_settings")).fetchall())
    return {"version": row[0] if row else None, "settings": settings}
