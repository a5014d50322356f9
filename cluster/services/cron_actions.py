"""What operators do with cron jobs: pause, resume, backfill.

A backfill writes the occurrences of a past range: the slots the schedule
had there, each at most once by the database's ``(cron_id, scheduled_for)``
key, so a backfill run twice (or over a night that partly ran) doubles
nothing. Each call writes at most :data:`MAX_BACKFILL` slots, none older
than the history's retention (the janitor prunes that key's rows with it).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import shardmap
from cluster.cron.plan import schedule_of
from cluster.errors import Conflict, InvalidRequest
from cluster.model import (
    BackfillParams,
    BackfillResult,
    CronRecord,
    PauseCronParams,
    PendingParams,
    ResumeCronParams,
)
from cluster.services.context import Services
from cluster.services.crons import load_cron
from cluster.services.routing import owner_and

__all__ = ["MAX_BACKFILL", "backfill_cron", "pause_cron", "resume_cron"]

MAX_BACKFILL = 1000


async def pause_cron(
    ctx: Services, owner: str, cron_job_id: str, reason: str
) -> tuple[CronRecord, int]:
    """No slot is run while paused: the occurrences not yet due are
    withdrawn, and slots that pass meanwhile are handled on resume by the
    misfire policy. Pausing again only changes the reason."""
    cron, _ = await load_cron(ctx, owner, cron_job_id)
    params = PauseCronParams(cron.id, owner, reason)
    return await owner_and(ctx, cron.id, lambda at: ctx.crons.pause(at, params))


async def resume_cron(ctx: Services, owner: str, cron_job_id: str) -> tuple[CronRecord, int]:
    """Slots run again; those that passed while paused follow the misfire policy."""
    cron, _ = await load_cron(ctx, owner, cron_job_id)
    params = ResumeCronParams(cron.id, owner)
    return await owner_and(ctx, cron.id, lambda at: ctx.crons.resume(at, params))


async def backfill_cron(
    ctx: Services,
    owner: str,
    cron_job_id: str,
    start: datetime,
    end: datetime,
    *,
    skip_overlap: bool,
    rerun: bool,
    dry_run: bool,
) -> tuple[BackfillResult, datetime | None]:
    """The occurrences of the slots in ``[start, end)``, due now, and where
    to go on when the range holds more than :data:`MAX_BACKFILL` slots.
    With ``skip_overlap`` nothing is written (409) while an occurrence of
    the cron is pending or running; a dry run says what the call would do."""
    cron, shard = await load_cron(ctx, owner, cron_job_id)
    now = ctx.clock.now()
    if start >= end:
        raise InvalidRequest("from must be before to", field="from")
    if end > now:
        raise InvalidRequest(
            "to is in the future: a backfill covers past slots (the schedule runs the rest)",
            field="to",
        )
    days = ctx.settings.history_retention_days
    if start < now - timedelta(days=days):
        # The ledger that makes a slot run once keeps a slot as long as the
        # history does: an older one could run twice.
        raise InvalidRequest(
            f"from is older than the history's retention ({days} days): "
            "whether those slots ran is no longer known",
            field="from",
        )
    fires = schedule_of(cron).fires(start - timedelta(microseconds=1), count=MAX_BACKFILL + 1)
    slots = [f.scheduled_for for f in fires if f.scheduled_for < end]
    next_from = slots[MAX_BACKFILL] if len(slots) > MAX_BACKFILL else None
    slots = slots[:MAX_BACKFILL]
    # A dry run says what the call would do: with SKIP, that is this 409.
    if skip_overlap and slots:
        pending = await ctx.crons.pending(shard, PendingParams((cron.id,)))
        if pending[cron.id].pending:
            raise Conflict(
                "overlap is SKIP and an occurrence of this cron job is pending or running",
                cron_job_id=cron_job_id,
            )
    slot = shardmap.slot_of(cron.id)
    result = await ctx.crons.backfill(
        shard,
        BackfillParams(
            cron_id=cron.id,
            owner=owner,
            slots=tuple(slots),
            job_ids=tuple(shardmap.new_uuid(slot) for _ in slots),
            run_at=now,
            rerun=rerun,
            dry_run=dry_run,
        ),
    )
    return result, next_from
