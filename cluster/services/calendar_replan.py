"""A calendar changed: the occurrences of the crons that follow it, planned
again by its new version (issue 45, "edits without surprises").

Called by the calendar's PUT once the new version is on every shard. For each
cron that follows the calendar, on each shard:

* an occurrence not started yet (SCHEDULED) whose slot the new version
  skips is cancelled; one it moves elsewhere (a day became a holiday, or
  stopped being one) gets its new ``runAt``; its ``scheduledFor`` (the slot,
  its identity) never changes, so nothing is doubled;
* a slot between now and the cron's ``next_fire_at`` that the old version
  skipped and the new one keeps (a day became a business day) is made, once:
  the slot ledger refuses a second occurrence of (cron_id, scheduledFor);
* slots from ``next_fire_at`` on are the materializer's, which reads the new
  version on its next page.

A materializer may hold the old version for a moment (it read the shard's
copy at the start of a page). Before reading a cron's occurrences the
re-plan records the new version on the cron (``hold_calendar_version``,
migration 23); the materializer's write carries the version it planned by
and loses its compare-and-set when that is older (the same row lock orders
the two), so it writes nothing and plans again, by the new version, on its
next pass.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import shardmap
from cluster.cron.plan import schedule_of
from cluster.cron.schedule import stable_jitter
from cluster.errors import Conflict, NotFound
from cluster.model import (
    CalendarRecord,
    CancelParams,
    CronRecord,
    CronRunsParams,
    JobStatus,
    ListCronsParams,
    Occurrence,
    RescheduleParams,
    TriggerCronParams,
)
from cluster.services.context import Services

__all__ = ["Replanned", "replan_changed", "replan_followers"]

log = logging.getLogger(__name__)

# Occurrences read per cron: the pending ones are its newest slots, and a
# cron has a lookahead's worth of them, plus runs moved up to 31 days on.
_RUNS_READ = 200
_PAGE = 500


@dataclass
class Replanned:
    """What a calendar's change did to the occurrences already made."""

    crons: int = 0
    cancelled: int = 0
    moved: int = 0
    made: int = 0


async def replan_followers(ctx: Services, owner: str, calendar: CalendarRecord) -> Replanned:
    """Plan again the pending occurrences of ``owner``'s crons that follow ``calendar``."""
    done = Replanned()
    now = ctx.clock.now()
    for shard in range(ctx.crons.shard_count):
        after = ""
        while True:
            page = await ctx.crons.list_page(shard, ListCronsParams(owner, after, _PAGE))
            for cron in page:
                if cron.calendar == calendar.name:
                    done.crons += 1
                    await _replan(ctx, shard, cron, calendar, now, done)
            if len(page) < _PAGE:
                break
            after = page[-1].name
    if done.crons:
        log.info(
            "calendar changed: occurrences planned again",
            extra={"calendar": calendar.name, "version": calendar.version, **vars(done)},
        )
    return done


async def replan_changed(ctx: Services, shard: int, cron: CronRecord) -> Replanned:
    """A PATCH changed ``cron``'s timing (its calendar, its policy, its
    schedule): its pending occurrences, made by the old definition (a moved
    run may be days away), are planned again by the new one, as a
    calendar's change plans its followers'. The PATCH's write changed
    ``next_fire_at``, so a materializer pass that read the old definition
    loses its compare-and-set."""
    done = Replanned(crons=1)
    calendar = None
    if cron.calendar is not None:
        calendar = await ctx.crons.get_calendar(shard, cron.owner, cron.calendar)
        if calendar is None or calendar.deleted:
            return done  # the PATCH is taken back (cluster/services/crons.py)
    await _replan(ctx, shard, cron, calendar, ctx.clock.now(), done)
    return done


async def _replan(
    ctx: Services,
    shard: int,
    cron: CronRecord,
    calendar: CalendarRecord | None,
    now: datetime,
    done: Replanned,
) -> None:
    if calendar is not None:
        # First: a materializer pass that planned by an older version writes
        # nothing after this, so what is read next is all there is to re-plan.
        await ctx.crons.hold_calendar_version(shard, cron.id, calendar.name, calendar.version)
    schedule = schedule_of(cron, calendar=calendar)
    jitter = timedelta(seconds=stable_jitter(cron.id_text, cron.jitter_seconds))
    runs = await ctx.crons.runs(shard, CronRunsParams(cron.id, _RUNS_READ))
    made = {r.scheduled_for for r in runs}
    for run in runs:
        if run.status != JobStatus.SCHEDULED or run.attempt > 0:
            continue  # started, finished, or a retry waiting out its backoff
        fire = schedule.at(run.scheduled_for)
        try:
            if fire is None:
                await ctx.store.cancel_job(shard, CancelParams(run.job_id, cron.owner, now))
                done.cancelled += 1
            elif fire.run_at + jitter != run.run_at:
                params = RescheduleParams(run.job_id, cron.owner, fire.run_at + jitter)
                await ctx.store.reschedule_job(shard, params)
                done.moved += 1
        except (Conflict, NotFound):
            continue  # it started (or finished) meanwhile: it is no longer ours to move
    if cron.next_fire_at is None or not cron.enabled or cron.paused_at is not None:
        return
    # Slots the old version skipped before the materializer's cursor.
    for fire in schedule.fires(now, until=cron.next_fire_at - timedelta(microseconds=1)):
        if fire.scheduled_for in made:
            continue
        occurrence = Occurrence(
            shardmap.new_uuid(shardmap.slot_of(cron.id)),
            fire.scheduled_for,
            fire.run_at + jitter,
            None
            if cron.starting_deadline_seconds is None
            else fire.run_at + jitter + timedelta(seconds=cron.starting_deadline_seconds),
        )
        try:
            if await ctx.crons.trigger(shard, TriggerCronParams(cron, occurrence)):
                done.made += 1
        except Conflict:
            continue  # FORBID with an occurrence pending: the slot is skipped, as planning would
