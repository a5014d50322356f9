"""The cron materializer: turn due cron slots into jobs, one shard at a time.

Leader-only to save work, but correct without a leader: every round reads a
cron's ``next_fire_at``, plans (:func:`cluster.cron.plan`), then inserts the
occurrences and moves ``next_fire_at`` in one transaction with a
compare-and-set. ``cron_occurrences``' primary key makes a second
materializer's inserts no-ops, and its compare-and-set fails, so it rolls
back. Two leaders at once are harmless.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime, timedelta

from cluster import metrics
from cluster.clock import Clock, SystemClock
from cluster.cron.plan import plan, schedule_of
from cluster.model import CronRecord, MaterializeParams
from cluster.store.postgres_cron import PgCronStore
from shardmap import encode_id

__all__ = ["Materializer"]

log = logging.getLogger(__name__)


class Materializer:
    name = "materializer"

    def __init__(
        self,
        crons: PgCronStore,
        *,
        clock: Clock | None = None,
        lookahead_seconds: float = 60.0,
        misfire_threshold_seconds: float = 60.0,
        catchup_cap: int = 100,
        batch: int = 500,
    ) -> None:
        self.crons = crons
        self.clock = clock or SystemClock()
        self.lookahead = timedelta(seconds=lookahead_seconds)
        self.misfire_threshold = timedelta(seconds=misfire_threshold_seconds)
        self.catchup_cap = catchup_cap
        self.batch = batch
        self._exported: dict[int, set[str]] = {}  # cron labels of the last-success gauge, by shard

    async def run_once(self, shard: int) -> int:
        """Materialize every due cron of ``shard``; returns occurrences created."""
        now = self.clock.now()
        created = 0
        for cron in await self.crons.waiting_fixed_delay(shard, self.batch):
            await self._restart_fixed_delay(shard, cron)
        for cron in await self.crons.due(shard, now, self.lookahead.total_seconds(), self.batch):
            created += await self.materialize(shard, cron, now)
        await self._export_last_success(shard)
        return created

    async def materialize(self, shard: int, cron: CronRecord, now: datetime) -> int:
        info = await self.crons.pending(shard, cron.id)
        p = plan(
            cron,
            schedule_of(cron),
            now,
            pending=info.pending,
            lookahead=self.lookahead,
            misfire_threshold=self.misfire_threshold,
            catchup_cap=self.catchup_cap,
        )
        if p.next_fire_at == cron.next_fire_at and not p.occurrences and not p.missed and not p.skipped:
            return 0  # waiting on FORBID: nothing to write
        created = await self.crons.materialize(
            shard,
            MaterializeParams(
                cron_id=cron.id,
                expected_next=cron.next_fire_at,
                occurrences=tuple(p.occurrences),
                next_fire_at=p.next_fire_at,
                last_fire=p.last_fire,
                missed=p.missed,
                skipped=p.skipped,
            ),
        )
        if created is None:
            log.info("cron advanced by another materializer", extra={"cron_id": cron.id_text, "shard": shard})
            return 0
        label = cron.id_text
        if p.missed_misfire:
            metrics.CRON_MISSED.labels(label, "misfire").inc(p.missed_misfire)
        if p.missed_deadline:
            metrics.CRON_MISSED.labels(label, "starting_deadline").inc(p.missed_deadline)
        if p.skipped:
            metrics.CRON_SKIPPED.labels(label).inc(p.skipped)
        if created:
            metrics.CRON_MATERIALIZED.labels(str(shard)).inc(created)
        if p.missed or p.skipped:
            log.warning(
                "cron slots not run: %d missed (misfire %s), %d skipped (concurrency %s)",
                p.missed,
                cron.misfire_policy,
                p.skipped,
                cron.concurrency,
                extra={"cron_id": label, "shard": shard},
            )
        return created

    async def _restart_fixed_delay(self, shard: int, cron: CronRecord) -> None:
        """A fixed-delay cron waits for its occurrence to finish; then its next
        slot is that finish plus the delay."""
        info = await self.crons.pending(shard, cron.id)
        if info.pending:
            return
        schedule = schedule_of(cron)
        base = info.last_finished or self.clock.now()
        nxt = schedule.next_fire(base)
        if nxt is None:
            return
        await self.crons.materialize(
            shard,
            MaterializeParams(
                cron_id=cron.id, expected_next=None, occurrences=(), next_fire_at=nxt.scheduled_for, last_fire=None
            ),
        )

    async def _export_last_success(self, shard: int) -> None:
        current = {encode_id("cron", cron_id): when for cron_id, when in await self.crons.last_successes(shard)}
        for label, when in current.items():
            metrics.CRON_LAST_SUCCESS.labels(label).set(when.timestamp())
        # A cron deleted or disabled since the last pass leaves the gauge, or
        # the silent-cron alert would fire for it for ever.
        self._drop_series(self._exported.get(shard, set()) - current.keys())
        self._exported[shard] = set(current)

    def forget(self, shard: int) -> None:
        """This worker no longer leads ``shard``: its crons' series are the
        new leader's to export (a stale copy here would outlive a delete)."""
        self._drop_series(self._exported.pop(shard, set()))

    @staticmethod
    def _drop_series(labels: set[str]) -> None:
        for label in labels:
            with contextlib.suppress(KeyError):  # never exported, or gone already
                metrics.CRON_LAST_SUCCESS.remove(label)
