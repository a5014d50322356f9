"""What operators do with cron jobs: pause, resume, backfill
(``/api/v1/cron-jobs/{id}/…``). The routes translate HTTP; the rules are
the service's (:mod:`cluster.services.cron_actions`).
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter

import shardmap
from cluster.api.context import Ctx, Owner
from cluster.api.cron_schemas import CronOut
from cluster.api.crons import cron_out
from cluster.api.operator_schemas import BackfillIn, BackfillOut, BackfillSlotOut, PauseIn, problems
from cluster.instants import parse_instant, utc
from cluster.model import BackfillResult
from cluster.services import cron_actions as actions

__all__ = ["backfill_out", "router"]

router = APIRouter(tags=["cron-jobs"])


@router.post(
    "/api/v1/cron-jobs/{cron_job_id}/pause", response_model=CronOut, responses=problems(404, 422)
)
async def pause_cron(cron_job_id: str, body: PauseIn, ctx: Ctx, owner: Owner) -> CronOut:
    """No slot is run while paused: the occurrences not yet due are withdrawn,
    and slots that pass meanwhile are handled on resume by the misfire
    policy (as after an outage: RUN_ALL catches up, RUN_ONCE runs the
    latest, SKIP counts them as missed). Pausing again only changes the reason."""
    return cron_out(*await actions.pause_cron(ctx, owner, cron_job_id, body.reason))


@router.post(
    "/api/v1/cron-jobs/{cron_job_id}/resume", response_model=CronOut, responses=problems(404)
)
async def resume_cron(cron_job_id: str, ctx: Ctx, owner: Owner) -> CronOut:
    """Slots run again; those that passed while paused follow the misfire policy."""
    return cron_out(*await actions.resume_cron(ctx, owner, cron_job_id))


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
    result, next_from = await actions.backfill_cron(
        ctx,
        owner,
        cron_job_id,
        utc(parse_instant(body.from_, "from")),
        utc(parse_instant(body.to, "to")),
        skip_overlap=body.overlap == "SKIP",
        rerun=body.rerun,
        dry_run=body.dryRun,
    )
    return backfill_out(result, next_from, body.dryRun)


def backfill_out(result: BackfillResult, next_from: datetime | None, dry_run: bool) -> BackfillOut:
    out = [
        BackfillSlotOut(
            scheduledFor=s.scheduled_for,
            jobId=None
            if dry_run and s.outcome == "created"
            else shardmap.encode_id("job", s.job_id),
            outcome=s.outcome,
            status=s.status.value if s.status is not None else None,
        )
        for s in result.slots
    ]
    return BackfillOut(
        dryRun=dry_run,
        slots=out,
        created=sum(1 for s in out if s.outcome == "created"),
        existing=sum(1 for s in out if s.outcome == "exists"),
        rerun=sum(1 for s in out if s.outcome == "rerun"),
        nextFrom=next_from,
    )
