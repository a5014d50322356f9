"""What the batch endpoints (jobs and cron jobs) share: one result per item,
in request order, each a success or the problem a single request would
have answered. The writes are the service's
(:func:`cluster.services.batches.write_by_shard`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError
from starlette.responses import Response

from cluster.api.problems import problem_for, validation_problem
from cluster.errors import VakitError
from cluster.model.jsontext import json_bytes

__all__ = ["Results", "failed", "fill_results", "item_failure", "json_response"]

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


def fill_results(
    outcomes: dict[int, R | Exception],
    result_of: Callable[[int, R], dict[str, Any]],
    results: Results,
    where: str,
) -> None:
    """Each written item's answer in ``results[index]``: ``result_of`` for a
    success, the item's problem for an error (a shard's failure, the same
    exception for each of its items, is translated once: 503 for a shard
    that is down)."""
    problems: dict[int, dict[str, Any]] = {}
    for index, outcome in outcomes.items():
        if isinstance(outcome, Exception):
            problem = problems.get(id(outcome))
            if problem is None:
                problem = problems[id(outcome)] = problem_for(outcome, where=where)[0]
            results[index] = failed(index, problem)
        else:
            results[index] = result_of(index, outcome)
