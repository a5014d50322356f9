"""What the batch endpoints (jobs and cron jobs) share: one result per item,
items grouped by shard and written with one call per shard, the shards at
once, and a whole shard's failure given to each of its items."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError
from starlette.responses import Response

from cluster.api.problems import problem_for, validation_problem
from cluster.errors import VakitError
from cluster.model.jsontext import json_bytes

__all__ = ["Results", "failed", "item_failure", "json_response", "write_shards"]

T = TypeVar("T")
R = TypeVar("R")
# One entry per item of the request, in its order; None until decided.
Results = list[dict[str, Any] | None]


def json_response(content: Any, status: int = 200) -> Response:
    """What FastAPI's JSONResponse would send, without a response model's
    round trip (the endpoints' models still document it)."""
    return Response(json_bytes(content), status_code=status, media_type="application/json")


def failed(index: int, problem: dict[str, Any]) -> dict[str, Any]:
    return {"index": index, "status": problem["status"], "problem": problem}


def item_failure(index: int, exc: ValidationError | VakitError, where: str) -> dict[str, Any]:
    """An item that cannot be written: the problem a single create would answer."""
    if isinstance(exc, ValidationError):
        return failed(index, validation_problem(list(exc.errors())))
    return failed(index, problem_for(exc, where=where)[0])


async def write_shards(
    by_shard: dict[int, list[tuple[int, T]]],
    write: Callable[[int, list[T]], Awaitable[Sequence[R | VakitError]]],
    result_of: Callable[[int, R], dict[str, Any]],
    results: Results,
    where: str,
) -> None:
    """``write`` each shard's items (``(index, item)`` pairs) at once and put
    each item's outcome in ``results[index]``: ``result_of`` for a success,
    the item's problem for an error returned in its slot. When a shard's
    write raises, each of its items gets that problem (503 for a shard that
    is down): no item is retried elsewhere, its write may have committed."""

    async def one(shard: int, items: list[tuple[int, T]]) -> None:
        try:
            outcomes = await write(shard, [item for _, item in items])
        except Exception as exc:
            problem = problem_for(exc, where=where)[0]
            for index, _ in items:
                results[index] = failed(index, problem)
            return
        for (index, _), outcome in zip(items, outcomes, strict=True):
            if isinstance(outcome, VakitError):
                results[index] = failed(index, problem_for(outcome, where=where)[0])
            else:
                results[index] = result_of(index, outcome)

    await asyncio.gather(*(one(shard, items) for shard, items in by_shard.items()))
