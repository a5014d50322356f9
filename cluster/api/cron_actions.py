"""What operators do with cron jobs: pause, resume, backfill
(``/api/v1/cron-jobs/{id}/…``).

A backfill writes the occurrences of a past range: the slots the schedule
had there, each at most once by the database's ``(cron_id, scheduled_for)``
key, so a backfill run twice (or over a night that partly ran) doubles
nothing. Each call writes at most :data:`MAX_BACKFILL` slots, none older
than the history's retention (the janitor prunes that key's rows with it).
"""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter

import shardmap
from cluster.api.context import Ctx, Owner
from cluster.api.cron_schemas import CronOut
from cluster.api.crons import cron_out, load_cron
from cluster.api.operator_schemas import (
    MAX_BACKFILL,
    BackfillIn,
    BackfillOut,
    BackfillSlotOut,
    PauseIn,
    problems,
)
from cluster.api.schemas import parse_rfc3339
from cluster.clock import utc
from cluster.cron.plan import schedule_of
from cluster.errors import Conflict, InvalidRequest
from cluster.model import BackfillParams, PauseCronParams, PendingParams, ResumeCronParams

__all__ = ["router"]

router = APIRouter(tags=["cron-jobs"])


@router.post(
    "/api/v1/cron-jobs/{cron_job_id}/pause", response_model=CronOut, responses=problems(404, 422)
)
async def pause_cron(cron_job_id: str, body: PauseIn, ctx: Ctx, owner: Owner) -> CronOut:
    """No slot is run while paused: the occurrences not yet due are withdrawn,
    and slots that pass meanwhile are handled on resume by the misfire
    policy (as after an outage: RUN_ALL catches up, RUN_ONCE runs the
    latest, SKIP counts them as missed). Pausing again only changes the reason."""
    cron, shard = await load_cron(ctx, cron_job_id, owner)
    saved = await ctx.crons.pause(shard, PauseCronParams(cron.id, owner, body.reason))
    return cron_out(saved, shard)


@router.post(
    "/api/v1/cron-jobs/{cron_job_id}/resume", response_model=CronOut, responses=problems(404)
)
async def resume_cron(cron_job_id: str, ctx: Ctx, owner: Owner) -> CronOut:
    """Slots run again; those that passed while paused follow the misfire policy."""
    cron, shard = await load_cron(ctx, cron_job_id, owner)
    saved = await ctx.crons.resume(shard, ResumeCronParams(cron.id, owner))
    return cron_out(saved, shard)


@router.post(
    "/api/v1/cron-jobs/{cron_job_id}/backfill",
    response_model=BackfillOut,
    responses=problems(404, 409, 422),
)
async def backfill_cron(cron_job_id: str, body: BackfillIn, ctx: Ctx, owner: Owner) -> BackfillOut:
    """Create the occurrences of the slots in ``[from, to)``, due now. A slot
    that has an occurrence (it ran, or is pending) is reported as
    ``exists`` and not doubled; with ``rerun`` one that finished runs again
    with a new attempt series (same jobId and scheduledFor). ``dryRun``
    writes nothing. At most 1,000 slots a call: continue from ``nextFrom``."""
    cron, shard = await load_cron(ctx, cron_job_id, owner)
    start = utc(parse_rfc3339(body.from_, "from"))
    end = utc(parse_rfc3339(body.to, "to"))
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
    if body.overlap == "SKIP" and slots:
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
            rerun=body.rerun,
            dry_run=body.dryRun,
        ),
    )
    out = [
        BackfillSlotOut(
            scheduledFor=s.scheduled_for,
            jobId=None
            if body.dryRun and s.outcome == "created"
            else shardmap.encode_id("job", s.job_id),
            outcome=s.outcome,
            status=s.status.value if s.status is not None else None,
        )
        for s in result.slots
    ]
    return BackfillOut(
        dryRun=body.dryRun,
        slots=out,
        created=sum(1 for s in out if s.outcome == "created"),
        existing=sum(1 for s in out if s.outcome == "exists"),
        rerun=sum(1 for s in out if s.outcome == "rerun"),
        nextFrom=next_from,
    )
