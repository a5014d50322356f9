"""Metrics of firings, recorded just after the instant.

At a round hour tens of thousands of jobs start in one pass of the event
loop, and every microsecond spent per job before the last one starts is
lateness of the last one. So a firing only notes its start and its result
here; the lateness histogram and the per-target counters are fed right after
the pass (and, while an instant is being started in slices, after its last
slice).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from cluster import metrics
from cluster.model import ClaimedJob
from cluster.targets import FireResult
from cluster.targets.kinds import KINDS
from cluster.worker.limits import target_key

__all__ = ["FiringMetrics"]


class FiringMetrics:
    """Notes of firings, turned into metrics soon after; ``hold_back()``
    says an instant is still being started (record after its last slice,
    when :meth:`soon` is called again)."""

    def __init__(self, hold_back: Callable[[], bool]) -> None:
        self._hold_back = hold_back
        self._started: list[tuple[int, str, float]] = []
        self._fired: list[tuple[ClaimedJob, FireResult, float]] = []
        self._call_children: dict[tuple[str, str], Any] = {}
        self._due = False
        self._lateness_children: dict[tuple[int, str], Any] = {}
        self._target_children: dict[tuple[tuple[str, str], str], Any] = {}

    def note_start(self, shard: int, kind: str, lateness: float) -> None:
        """Lateness of a firing that starts now."""
        self._started.append((shard, kind, lateness))
        self.soon()

    def note_fired(self, job: ClaimedJob, result: FireResult, seconds: float = 0.0) -> None:
        """``seconds``: how long the call to the target took."""
        self._fired.append((job, result, seconds))
        self.soon()

    def soon(self) -> None:
        if not self._due:
            self._due = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._due = False
        if self._hold_back():
            return
        started, self._started = self._started, []
        fired, self._fired = self._fired, []
        # Grouped by series, each group observed at once (a wave's firings
        # share a handful of series).
        lateness: dict[tuple[int, str], list[float]] = {}
        for shard, kind, late in started:
            lateness.setdefault((shard, kind), []).append(late if late > 0.0 else 0.0)
        for (shard, kind), values in lateness.items():
            metrics.observe_many(self._lateness(shard, kind), values)
        calls: dict[Any, list[float]] = {}
        fires: dict[Any, int] = {}
        for job, result, seconds in fired:
            call, fire = self._children(job, result)
            calls.setdefault(call, []).append(seconds)
            fires[fire] = fires.get(fire, 0) + 1
        for call, values in calls.items():
            metrics.observe_many(call, values)
        for fire, n in fires.items():
            fire.inc(n)

    def _lateness(self, shard: int, kind: str) -> Any:
        # labels() costs a dict lookup and string work per call; a wave calls
        # it per job, so the children are kept.
        key = (shard, kind)
        child = self._lateness_children.get(key)
        if child is None:
            child = self._lateness_children[key] = metrics.START_LATENESS.labels(str(shard), kind)
        return child

    def _children(self, job: ClaimedJob, result: FireResult) -> tuple[Any, Any]:
        """The series of a firing: its call's duration by target kind, and the
        per-target error rate the on-call watches; children cached, as the
        target key parses a URL."""
        # The kind and where it fires (URL, topic) decide the target key.
        where = (job.target_kind, KINDS.address(job.target))
        outcome = "ok" if result.ok else ("retry" if result.retryable else "rejected")
        call = self._call_children.get((job.target_kind, outcome))
        if call is None:
            call = metrics.TARGET_CALL_SECONDS.labels(job.target_kind, outcome)
            self._call_children[(job.target_kind, outcome)] = call
        child = self._target_children.get((where, outcome))
        if child is None:
            if len(self._target_children) > 10_000:
                self._target_children.clear()  # bounded, whatever the URLs
            child = metrics.TARGET_FIRES.labels(
                metrics.target_label(target_key(job.target)), outcome
            )
            self._target_children[(where, outcome)] = child
        return call, child
