"""The cron materializer: turn due cron slots into jobs, a shard at a time, in bulk.

Leader-only to save work, but correct without a leader. A pass reads due
crons a page at a time in (next_fire_at, id) order, plans every cron of the
page (:func:`cluster.cron.plan.plan`, schedules parsed once per distinct
expression and zone), and writes the whole page with one statement: per
cron a compare-and-set on ``next_fire_at``, and occurrences only for the
crons whose compare-and-set won. ``cron_occurrences``' primary key makes a
slot exist once ever. Two leaders at once are harmless: the second one's
compare-and-sets fail, or find the rows held and lose the round.

**Horizon.** A slot must exist before it is due, however many crons share
it. A pass materializes slots within ``lookahead``, and further ahead when
the crons due at some instant would take longer than the time left to
write at the rate measured so far: a million crons at midnight start
early enough to be done before midnight. A pass stops after its budget
and the next starts from the earliest due cron again, so a large instant
being written ahead never delays the slots due before it.

**Bounds.** ``endAt`` and ``maxRuns`` are planned (:func:`plan` reads them
from the page, with ``run_count``), and the write adds each cron's new
occurrences to its ``run_count`` in the same statement: still one statement
per page, never one per cron.

**Time.** A pass plans from one reading of the injected clock, taken at
its start, and refuses to plan when that clock and the shard's ``now()``
disagree by more than a bound: with a clock jumped an hour ahead, an hour
of slots would count as missed and a SKIP policy would drop them.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta

from cluster import metrics
from cluster.clock import Clock, SystemClock
from cluster.cron.calendar_rules import SETTLE_AHEAD
from cluster.cron.plan import Plan, ScheduleCache, exhausted, plan
from cluster.errors import VakitError
from cluster.model import (
    CalendarRecord,
    DueCountsParams,
    DueCron,
    DueCronsParams,
    LastSuccessParams,
    MaterializeBatchParams,
    MaterializeParams,
    MaterializeResult,
    PendingInfo,
    PendingParams,
    WaitingCronsParams,
)
from cluster.store.contracts.cron_upkeep import CronUpkeep
from shardmap import encode_id

__all__ = ["FOLD_DEFER_BACKLOG", "Materializer"]

log = logging.getLogger(__name__)

_NOTHING_PENDING = PendingInfo(0, None)
# Due jobs on a shard beyond which the silent-cron export (and the fold it
# runs first) waits for the backlog to drain (Materializer._fold_waits).
FOLD_DEFER_BACKLOG = 10_000
# The horizon: an instant is started when its crons, at the measured rate
# and with this factor to spare, would take longer than the time left
# (less two passes and a few seconds of margin).
_SAFETY = 1.5
_MARGIN_SECONDS = 5.0
# A page this small says more about latency than about throughput: the
# rate estimate learns only from larger ones.
_RATE_MIN_PAGE = 500
_RATE_WEIGHT = 0.3


class Materializer:
    """The leader task that writes cron occurrences (see the module doc)."""

    name = "materializer"

    def __init__(
        self,
        crons: CronUpkeep,
        *,
        clock: Clock | None = None,
        lookahead_seconds: float = 60.0,
        max_lookahead_seconds: float = 900.0,
        misfire_threshold_seconds: float = 60.0,
        catchup_cap: int = 100,
        page_size: int = 2000,
        interval_seconds: float = 5.0,
        far_horizon_seconds: float = 3600.0,
        max_clock_skew_seconds: float | None = 30.0,
        initial_rate: float = 2000.0,
        last_success_interval_seconds: float = 60.0,
        pass_budget_seconds: float = 15.0,
        last_success_series: int = 1000,
        backlog: Callable[[int], Awaitable[int]] | None = None,
        fold_defer_backlog: int = FOLD_DEFER_BACKLOG,
        max_fold_deferral_seconds: float = 300.0,
    ) -> None:
        self.crons = crons
        self.clock = clock or SystemClock()
        self.lookahead = timedelta(seconds=lookahead_seconds)
        self.max_lookahead = timedelta(seconds=max(max_lookahead_seconds, lookahead_seconds))
        self.misfire_threshold = timedelta(seconds=misfire_threshold_seconds)
        self.catchup_cap = catchup_cap
        self.page_size = page_size
        self.interval = interval_seconds
        self.far_horizon = far_horizon_seconds
        self.max_skew = max_clock_skew_seconds
        self.initial_rate = initial_rate
        self.last_success_interval = last_success_interval_seconds
        self.pass_budget = pass_budget_seconds
        self.last_success_series = last_success_series
        self.backlog = backlog
        self.fold_defer_backlog = fold_defer_backlog
        self.max_fold_deferral = max_fold_deferral_seconds
        # Since when each shard's export has waited for a backlog to drain.
        self._deferred_since: dict[int, float] = {}
        self.schedules = ScheduleCache()
        self._rate: dict[int, float] = {}  # crons planned and written per second, by shard
        self._seen: dict[int, float] = {}  # monotonic time of each shard's last pass
        # The last-success gauge's values by shard and label: crons not
        # declared share the label "other", whose value is the oldest of
        # them on every shard this process leads (the silent one, if any).
        self._exported: dict[int, dict[str, float]] = {}
        self._exported_at: dict[int, float] = {}
        # The furthest instant a pass started early, by shard: later passes
        # finish it even if the remaining count alone would wait again.
        self._started: dict[int, datetime] = {}

    async def run_once(self, shard: int) -> int:
        """Materialize the due crons of ``shard``, earliest first, for at most
        ``pass_budget`` seconds; returns occurrences created."""
        now = self.clock.now()  # the one reading this pass plans from
        self._seen[shard] = time.monotonic()
        if not await self._clock_agrees(shard, now):
            return 0
        created = await self._restart_fixed_delay(shard, now)
        horizon = await self.horizon(shard, now)
        created += await self._materialize_due(shard, now, horizon)
        await self._export_last_success(shard)
        return created

    async def _clock_agrees(self, shard: int, now: datetime) -> bool:
        if self.max_skew is None:
            return True
        database = await self.crons.database_now(shard)
        skew = (now - database).total_seconds()
        if abs(skew) <= self.max_skew:
            return True
        metrics.CRON_CLOCK_SKEW_REFUSED.labels(str(shard)).inc()
        log.warning(
            "materializer pass refused: this clock is %.1f s %s the shard's now(); "
            "planning across it would misfire or double slots",
            abs(skew),
            "ahead of" if skew > 0 else "behind",
            extra={"shard": shard, "skew_seconds": skew},
        )
        return False

    # -- the horizon -------------------------------------------------------------

    def rate(self, shard: int) -> float:
        """Crons per second this process can plan and write on ``shard``,
        shared with the other shards it leads (their passes run in turn)."""
        cutoff = time.monotonic() - 3 * (self.interval + self.pass_budget)
        led = sum(1 for seen in self._seen.values() if seen >= cutoff)
        # A long wave is written in passes of pass_budget, each followed by
        # the loop's interval of rest.
        duty = self.pass_budget / (self.pass_budget + self.interval)
        return self._rate.get(shard, self.initial_rate) * duty / max(1, led)

    async def horizon(self, shard: int, now: datetime) -> datetime:
        """How far ahead this pass materializes: ``lookahead``, or as far as
        the first instant whose wave would not be written in time if left to
        a later pass (bounded by ``max_lookahead``)."""
        horizon = now + self.lookahead
        if self.max_lookahead <= self.lookahead:
            return horizon
        started = self._started.get(shard)
        if started is not None and started > now:
            horizon = max(horizon, started)
        counts = await self.crons.due_counts(
            shard, DueCountsParams(now=now, until=now + self.max_lookahead)
        )
        rate = max(self.rate(shard), 1.0)
        total = 0
        for second, n in counts:
            total += n
            needed = total / rate * _SAFETY + 2 * self.interval + _MARGIN_SECONDS
            if (second - now).total_seconds() <= needed:
                # Counts are per second: the whole second is in.
                horizon = max(horizon, second + timedelta(microseconds=999_999))
        if horizon > now + self.lookahead:
            self._started[shard] = horizon
            log.info(
                "materializing %s ahead: %d crons due by then",
                horizon - now,
                sum(n for second, n in counts if second <= horizon),
                extra={"shard": shard},
            )
        return horizon

    def _learn_rate(self, shard: int, crons: int, seconds: float) -> None:
        if crons < _RATE_MIN_PAGE or seconds <= 0:
            return
        measured = crons / seconds
        old = self._rate.get(shard)
        self._rate[shard] = measured if old is None else old + _RATE_WEIGHT * (measured - old)

    # -- due crons ---------------------------------------------------------------

    async def _materialize_due(self, shard: int, now: datetime, horizon: datetime) -> int:
        lookahead = horizon - now
        after: tuple[datetime, uuid.UUID] | None = None
        created = 0
        # A pass ends after its budget even with due crons left: the next one
        # starts over from the earliest, so a large instant far ahead never
        # holds up the slots of every-minute crons due before it.
        deadline = time.monotonic() + self.pass_budget
        while True:
            started = time.perf_counter()
            unsettled_until = horizon + SETTLE_AHEAD  # PREVIOUS_BUSINESS_DAY crons
            params = DueCronsParams(horizon, after, self.page_size, unsettled_until)
            page = await self.crons.due(shard, params)
            if not page or page[-1].next_fire_at is None:  # due crons have a next fire
                return created
            after = (page[-1].next_fire_at, page[-1].id)
            created += await self._materialize_page(shard, page, now, lookahead)
            self._learn_rate(shard, len(page), time.perf_counter() - started)
            if len(page) < self.page_size:
                return created
            if time.monotonic() > deadline:
                log.info(
                    "materializer pass budget spent with due crons left; the next pass goes on",
                    extra={"shard": shard, "created": created},
                )
                return created

    async def _materialize_page(
        self, shard: int, page: Sequence[DueCron], now: datetime, lookahead: timedelta
    ) -> int:
        # Pending counts only where the policy reads them.
        one_at_a_time = tuple(
            c.id for c in page if c.concurrency == "FORBID" or c.schedule_kind == "FIXED_DELAY"
        )
        pending = (
            await self.crons.pending(shard, PendingParams(one_at_a_time)) if one_at_a_time else {}
        )
        calendars = await self._calendars(shard, page)
        versions: dict[uuid.UUID, int] = {}  # the calendar version each cron was planned by
        planned: list[tuple[DueCron, Plan]] = []
        for cron in page:
            calendar = None
            if cron.calendar is not None:
                calendar = calendars.get((cron.owner, cron.calendar))
                if calendar is None or calendar.deleted:
                    # Without its calendar a cron could fire on a holiday:
                    # it waits (its slots come late, and the misfire policy
                    # decides) until the shard has a copy again.
                    log.error(
                        "cron's calendar %r is not on this shard; not planned",
                        cron.calendar,
                        extra={"cron_id": cron.id_text, "shard": shard},
                    )
                    continue
                versions[cron.id] = calendar.version
            try:
                p = plan(
                    cron,
                    self.schedules.slots(cron, calendar),
                    now,
                    pending=pending.get(cron.id, _NOTHING_PENDING).pending,
                    lookahead=lookahead,
                    misfire_threshold=self.misfire_threshold,
                    catchup_cap=self.catchup_cap,
                )
            except VakitError as exc:
                # A definition that no longer parses (a zone gone from the
                # tz database) must not hold up the rest of the page.
                log.error(
                    "cron cannot be planned: %s",
                    exc,
                    extra={"cron_id": cron.id_text, "shard": shard},
                )
                continue
            if (
                p.next_fire_at == cron.next_fire_at
                and p.settled == cron.settled
                and not p.occurrences
                and not p.missed
                and not p.skipped
            ):
                continue  # waiting on FORBID: nothing to write
            planned.append((cron, p))
        if not planned:
            return 0
        result = await self.crons.materialize(
            shard,
            MaterializeBatchParams(
                items=tuple(
                    MaterializeParams(
                        cron_id=cron.id,
                        expected_next=cron.next_fire_at,
                        occurrences=tuple(p.occurrences),
                        next_fire_at=p.next_fire_at,
                        last_fire=p.last_fire,
                        missed=p.missed,
                        skipped=p.skipped,
                        runs=p.runs,
                        calendar_version=versions.get(cron.id, 0),
                        settled=p.settled,
                    )
                    for cron, p in planned
                ),
                now=now,
                far_horizon_seconds=self.far_horizon,
            ),
        )
        self._account(shard, planned, result)
        return result.created

    async def _calendars(
        self, shard: int, page: Sequence[DueCron]
    ) -> dict[tuple[str, str], CalendarRecord | None]:
        """The shard's copy of each calendar the page's crons follow, read
        once a page (a page of crons without calendars reads none)."""
        wanted = {(c.owner, name) for c in page if (name := c.calendar) is not None}
        found: dict[tuple[str, str], CalendarRecord | None] = {}
        for owner, name in wanted:
            found[(owner, name)] = await self.crons.get_calendar(shard, owner, name)
        return found

    def _account(
        self, shard: int, planned: Sequence[tuple[DueCron, Plan]], result: MaterializeResult
    ) -> None:
        lost = 0
        for cron, p in planned:
            if cron.id not in result.advanced:
                lost += 1
                continue
            if not (p.missed or p.skipped):
                continue
            label = metrics.cron_label(cron.id_text)
            if p.missed_misfire:
                metrics.CRON_MISSED.labels(label, "misfire").inc(p.missed_misfire)
            if p.missed_deadline:
                metrics.CRON_MISSED.labels(label, "starting_deadline").inc(p.missed_deadline)
            if p.skipped:
                metrics.CRON_SKIPPED.labels(label).inc(p.skipped)
            log.warning(
                "cron slots not run: %d missed (misfire %s), %d skipped (concurrency %s)",
                p.missed,
                cron.misfire_policy,
                p.skipped,
                cron.concurrency,
                extra={"cron_id": cron.id_text, "shard": shard},
            )
        for cron_id in result.refused:
            label = encode_id("cron", cron_id)
            metrics.CRON_SKIPPED.labels(metrics.cron_label(label)).inc()
            log.warning(
                "cron slot skipped: concurrency FORBID and a manual run is pending",
                extra={"cron_id": label, "shard": shard},
            )
        if result.created:
            metrics.CRON_MATERIALIZED.labels(str(shard)).inc(result.created)
        if lost:
            log.info(
                "%d crons advanced by another materializer (or held by another writer); "
                "none of their occurrences written",
                lost,
                extra={"shard": shard},
            )

    # -- fixed delay -------------------------------------------------------------

    async def _restart_fixed_delay(self, shard: int, now: datetime) -> int:
        """A fixed-delay cron waits for its occurrence to finish; then its next
        slot is that finish plus the delay (or now plus the delay, when it
        has never run)."""
        after = None
        while True:
            waiting = await self.crons.waiting_fixed_delay(
                shard, WaitingCronsParams(limit=self.page_size, after=after)
            )
            if not waiting:
                return 0
            after = waiting[-1].id
            info = await self.crons.pending(
                shard, PendingParams(tuple(c.id for c in waiting), with_finished=True)
            )
            items = []
            for cron in waiting:
                state = info.get(cron.id, _NOTHING_PENDING)
                if state.pending:
                    continue
                try:
                    nxt = self.schedules.slots(cron).next_fire(state.last_finished or now)
                except VakitError as exc:
                    log.error(
                        "cron cannot be planned: %s",
                        exc,
                        extra={"cron_id": cron.id_text, "shard": shard},
                    )
                    continue
                if nxt is None or exhausted(cron):
                    continue
                if cron.end_at is not None and nxt.scheduled_for > cron.end_at:
                    continue  # endAt reached; the query stops reading it once endAt passes
                items.append(MaterializeParams(cron.id, None, (), nxt.scheduled_for, None))
            if items:
                await self.crons.materialize(
                    shard,
                    MaterializeBatchParams(
                        tuple(items), now=now, far_horizon_seconds=self.far_horizon
                    ),
                )
            if len(waiting) < self.page_size:
                return 0

    # -- the silent-cron gauge ---------------------------------------------------

    async def _export_last_success(self, shard: int) -> None:
        # Every pass would read every enabled cron of the shard: a million
        # rows every 5 s. The alert it feeds counts in hours, and needs only
        # the oldest crons: a silent one is among them.
        last = self._exported_at.get(shard)
        if last is not None and time.monotonic() - last < self.last_success_interval:
            return
        if await self._fold_waits(shard):
            return
        self._deferred_since.pop(shard, None)
        self._exported_at[shard] = time.monotonic()
        oldest = await self.crons.last_successes(shard, LastSuccessParams(self.last_success_series))
        current: dict[str, float] = {}
        for cron_id, when in oldest:
            label = metrics.cron_label(encode_id("cron", cron_id))
            stamp = when.timestamp()
            if stamp < current.get(label, float("inf")):
                current[label] = stamp
        previous = self._exported.get(shard, {})
        self._exported[shard] = current
        self._publish(previous.keys() | current.keys())

    async def _fold_waits(self, shard: int) -> bool:
        """The export folds the history into the crons first: after a
        million-cron wave, a million cron rows rewritten, up to 2 s of the
        shard a call (fold_budget_seconds). While the wave drains (the
        shard's due backlog is over ``fold_defer_backlog``; read here, as
        the leader need not own the shard its backlog probe reads) that is
        CPU taken from the claims and completions that start jobs on time,
        so it waits; at most ``max_fold_deferral`` seconds, as the
        silent-cron alert counts in hours and a shard that stays behind
        must not silence it."""
        if self.backlog is None:
            return False
        due = await self.backlog(shard)
        if due <= self.fold_defer_backlog:
            return False
        now = time.monotonic()
        since = self._deferred_since.get(shard)
        if since is None:
            self._deferred_since[shard] = since = now
            log.info(
                "cron fold waits for the backlog to drain", extra={"shard": shard, "backlog": due}
            )
        return now - since < self.max_fold_deferral

    def forget(self, shard: int) -> None:
        """This worker no longer leads ``shard``: its crons' series are the
        new leader's to export (a stale copy here would outlive a delete)."""
        self._publish(self._exported.pop(shard, {}).keys())
        self._exported_at.pop(shard, None)
        self._deferred_since.pop(shard, None)
        self._seen.pop(shard, None)
        self._started.pop(shard, None)

    def _publish(self, labels: Iterable[str]) -> None:
        """Set each label's gauge to its oldest value over the shards led, or
        remove it when none has it any more: a cron deleted or disabled, or
        a shard led elsewhere now, leaves the gauge, or the silent-cron alert
        would fire for it for ever."""
        for label in labels:
            stamps = [e[label] for e in self._exported.values() if label in e]
            if stamps:
                metrics.CRON_LAST_SUCCESS.labels(label).set(min(stamps))
            else:
                with contextlib.suppress(KeyError):  # never exported, or gone already
                    metrics.CRON_LAST_SUCCESS.remove(label)
