"""Operations endpoints: ``/healthz``, ``/readyz``, ``/api/v1/cluster``,
``/api/v1/cluster/lateness``, ``/metrics``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from cluster.api.context import Ctx, Operator
from cluster.api.operator_schemas import LatenessMinuteOut, LatenessOut, ShardLatenessOut
from cluster.coordination.report import cluster_status
from cluster.model import LatenessMinute
from cluster.services.insight import Lateness, start_lateness
from cluster.services.readiness import ShardReadiness, shard_readiness

__all__ = ["cluster_lateness", "lateness_out", "readiness_out", "router"]

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    responses={
        503: {
            "description": "Not ready: a shard is unreachable, unmigrated or not polled; "
            "the body says which, as the 200's does.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
)
async def readyz(ctx: Ctx) -> JSONResponse:
    """200 once every shard is reachable and migrated and has a polling worker."""
    report = await shard_readiness(ctx.store, ctx.latest_schema_version)
    ready = all(s.ready for s in report)
    body = {"ready": ready, "shards": [readiness_out(s) for s in report]}
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/api/v1/cluster")
async def cluster_view(ctx: Ctx, operator: Operator) -> dict[str, Any]:
    """Members, shard owners and leaders, backlog and oldest due age per shard.
    Operator tokens only: host names, PIDs and every owner's backlog."""
    # The view connects in the background (app.py); until it has, the
    # report says coordination is unavailable.
    status = await cluster_status(ctx.store, ctx.view, coordinated=ctx.view_factory is not None)
    # The slot map this process routes by (0: slot % shards, never resharded).
    status["slotMap"] = {"epoch": ctx.shards.epoch, "slots": ctx.shards.counts()}
    return status


@router.get("/api/v1/cluster/lateness", response_model=LatenessOut)
async def cluster_lateness(
    ctx: Ctx,
    operator: Operator,
    minutes: int = Query(
        15, ge=1, le=60, description="The last this many UTC minutes, the current one included."
    ),
) -> LatenessOut:
    """Start lateness (how long after its runAt an attempt started) by minute,
    from the attempt logs of every shard: per shard, and the worst shard's.
    Operator tokens only."""
    return lateness_out(await start_lateness(ctx, minutes), minutes)


def lateness_out(lateness: Lateness, minutes: int) -> LatenessOut:
    shards = [
        ShardLatenessOut(shard=s.shard, minutes=[_minute_out(m) for m in s.minutes], error=s.error)
        for s in lateness.shards
    ]
    cluster = [_minute_out(m) for m in lateness.cluster]
    return LatenessOut(
        windowMinutes=minutes, cluster=cluster, shards=shards, missingShards=lateness.missing
    )


def _minute_out(m: LatenessMinute) -> LatenessMinuteOut:
    return LatenessMinuteOut(
        minute=m.minute, count=m.count, p50Seconds=m.p50_seconds, p99Seconds=m.p99_seconds,
        maxSeconds=m.max_seconds,
    )  # fmt: skip


@router.get("/metrics", include_in_schema=False)
async def metrics_endpoint(operator: Operator) -> Response:
    """Prometheus metrics, to operator tokens. ``api_metrics_port`` serves
    them without a token on an interface of the operator's choosing."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def readiness_out(shard: ShardReadiness) -> dict[str, Any]:
    """A shard's entry in ``/readyz``'s body, its fields in the order they
    have always been written."""
    entry: dict[str, Any] = {"shard": shard.shard}
    if shard.reachable:
        entry.update(
            migrated=shard.migrated, schemaVersion=shard.schema_version, workers=shard.workers,
            reachable=True,
        )  # fmt: skip
    else:
        entry.update(reachable=False, migrated=False, workers=0, error=shard.error)
    entry["ready"] = shard.ready
    return entry
