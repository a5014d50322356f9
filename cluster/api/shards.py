"""Growing and shrinking the cluster: ``/api/v1/shards`` (operator tokens only).

The calls behind ``vakit shards add|rebalance|drain|cancel|status``. They need
ZooKeeper (the shard list, the slot map and the move record live there): a
deployment without it answers 409 and changes nothing.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from cluster.api.context import Ctx, Operator
from cluster.api.openapi import problem_responses
from cluster.errors import Conflict
from cluster.resharding.port import Resharding

__all__ = ["AddShardIn", "router"]

router = APIRouter(tags=["shards"])


class AddShardIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dsn: str = Field(min_length=1, max_length=2000, description="The new shard's PostgreSQL DSN.")


def _resharding(ctx: Ctx) -> Resharding:
    if ctx.resharding is None:
        raise Conflict(
            "resharding needs ZooKeeper (VAKIT_ZK): the shard list, the slot map and the "
            "move record live there"
        )
    return ctx.resharding


@router.get("/api/v1/shards")
async def shards_status(
    ctx: Ctx,
    operator: Operator,
    rows: bool = Query(True, description="Count each shard's movable rows (reads every table)."),
) -> dict[str, Any]:
    """The slot map (epoch, slots per shard), the move under way (slots done,
    rows copied, rate, ETA) and each shard's movable rows."""
    return await _resharding(ctx).status(rows)


@router.post("/api/v1/shards", status_code=201)
async def add_shard(body: AddShardIn, ctx: Ctx, operator: Operator) -> dict[str, Any]:
    """Migrate a new database and register it as the next shard, holding no
    slot until a rebalance. Idempotent: repeat it after a failure."""
    return await _resharding(ctx).add(body.dsn)


@router.post("/api/v1/shards/rebalance", status_code=202)
async def rebalance(ctx: Ctx, operator: Operator) -> dict[str, Any]:
    """Start moving slots until every shard not drained holds an even share."""
    return await _resharding(ctx).request("rebalance")


@router.post("/api/v1/shards/{shard}/drain", status_code=202, responses=problem_responses(409))
async def drain(ctx: Ctx, operator: Operator, shard: int = Path(ge=0, le=4095)) -> dict[str, Any]:
    """Start moving every slot off ``shard`` (which then takes no slot in a
    rebalance), so it can be removed."""
    return await _resharding(ctx).request("drain", shard)


@router.post("/api/v1/shards/move/cancel", status_code=202, responses=problem_responses(409))
async def cancel(ctx: Ctx, operator: Operator) -> dict[str, Any]:
    """Stop the move under way; a batch not yet flipped is rolled back."""
    return await _resharding(ctx).cancel()
