"""Limits that hold across the cluster: ``/api/v1/limits`` (operator tokens
only; issue 44, docs/design/limits.md).

The calls behind ``vakit limits``: read the limits in force, set a key's
limit at run time, drop it (back to ``VAKIT_TARGET_LIMITS``). A change
reaches every worker within a few seconds, without a restart.
"""

from __future__ import annotations

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from cluster.api.context import Ctx, Operator
from cluster.errors import InvalidRequest
from cluster.model import TargetLimit
from cluster.services.limits import LimitsView, drop_limit, read_limits, set_limit

__all__ = ["LimitIn", "LimitOut", "LimitsOut", "router"]

router = APIRouter(tags=["limits"])

_KEY = Path(
    min_length=1,
    max_length=300,
    description="What the limit applies to: an HTTP host (`billing.internal`) or "
    "`kafka:<topic>`, as VAKIT_TARGET_LIMITS names it.",
)


class LimitIn(BaseModel):
    """A key's limit for the whole cluster. Neither concurrency nor rate:
    the key is not limited, whatever the configuration says."""

    model_config = ConfigDict(extra="forbid")
    concurrency: int | None = Field(
        None, ge=0, le=1_000_000, description="Firings in flight at once (0 pauses the key)."
    )
    rate: float | None = Field(None, gt=0, le=1_000_000, description="Firings per second.")
    burst: float | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Firings that may start together; default a fiftieth of the rate, at least 1.",
    )


class LimitOut(BaseModel):
    key: str
    concurrency: int | None
    rate: float | None
    burst: float | None = Field(description="As set; null: the default (rate / 50, at least 1).")
    source: str = Field(description="`config` (VAKIT_TARGET_LIMITS) or `runtime` (set here).")
    scope: str = Field("cluster", description="Limits hold for the whole cluster.")
    effectiveConcurrency: int | None = Field(
        description="The concurrency the cluster applies: whole shares per shard (at least 1 each)."
    )
    consistent: bool = Field(
        description="Every shard read holds the same run-time limit (false: repeat the PUT)."
    )


class LimitsOut(BaseModel):
    shards: int
    limits: list[LimitOut]
    unreadableShards: list[int] = Field(
        description="Shards whose run-time limits could not be read."
    )


def _out(view: LimitsView) -> LimitsOut:
    return LimitsOut(
        shards=view.shards,
        limits=[
            LimitOut(
                key=v.key,
                concurrency=v.limit.concurrency,
                rate=v.limit.rate,
                burst=v.limit.burst,
                source=v.source,
                effectiveConcurrency=v.effective_concurrency,
                consistent=v.consistent,
            )
            for v in view.limits
        ],
        unreadableShards=view.unreadable,
    )


@router.get("/api/v1/limits", response_model=LimitsOut)
async def get_limits(ctx: Ctx, operator: Operator) -> LimitsOut:
    """The limits in force, each for the whole cluster: configured ones and
    those set at run time (which win)."""
    return _out(await read_limits(ctx))


@router.put("/api/v1/limits/{key}", response_model=LimitsOut)
async def put_limit(key: str = _KEY, *, body: LimitIn, ctx: Ctx, operator: Operator) -> LimitsOut:
    """Set a key's limit on every shard (idempotent: repeat it after a 503)."""
    try:
        limit = TargetLimit(body.concurrency, body.rate, body.burst)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc
    return _out(await set_limit(ctx, key, limit))


@router.delete("/api/v1/limits/{key}", response_model=LimitsOut)
async def delete_limit(key: str = _KEY, *, ctx: Ctx, operator: Operator) -> LimitsOut:
    """Drop a key's run-time limit: the configured one, if any, applies again."""
    return _out(await drop_limit(ctx, key))
