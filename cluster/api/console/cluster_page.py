"""The cluster page, an operator's: shards, backlogs and lateness charts."""

from __future__ import annotations

from datetime import UTC

from fastapi import APIRouter, Request
from starlette.responses import Response

from cluster.api.console.lateness_chart import CHART_H, CHART_W, LATENESS_MINUTES, chart
from cluster.api.console.rendering import ctx_of, error_page, render_page
from cluster.api.console.session import Session, session_of
from cluster.api.ops import lateness_out
from cluster.coordination.report import cluster_status
from cluster.errors import VakitError
from cluster.services.insight import start_lateness

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.get("/ui/cluster")
async def cluster_page(request: Request) -> Response:
    ctx = ctx_of(request)
    session: Session | None = None
    try:
        session = session_of(ctx, request)
        ctx.operator_for(session.authorization)  # 401, or 403 for a tenant's token
        report = await cluster_status(ctx.store, ctx.view, coordinated=ctx.view_factory is not None)
        lateness = lateness_out(await start_lateness(ctx, LATENESS_MINUTES), LATENESS_MINUTES)
    except VakitError as exc:
        return error_page(request, exc, session)
    backlogs = [s.get("backlog") or 0 for s in report["shards"]]
    last = ctx.clock.now().astimezone(UTC).replace(second=0, microsecond=0)
    by_shard = {s.shard: s for s in lateness.shards}
    return render_page(
        request, "cluster.html", session=session, report=report, widest=max([1, *backlogs]),
        lateness=lateness, chart=chart(lateness.cluster, last, CHART_W, CHART_H),
        shard_lateness=by_shard,
        slot_map={"epoch": ctx.shards.epoch, "counts": ctx.shards.counts()},
        shard_charts={s.shard: chart(s.minutes, last, 90, 20) for s in lateness.shards},
    )  # fmt: skip
