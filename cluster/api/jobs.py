"""One-shot jobs under ``/api/v1/jobs``: create (one or a batch), get, move, cancel.

The routes translate HTTP; the rules are the service's
(:mod:`cluster.services.jobs`).

A create is the API's hot path (a midnight wave is loaded through it), so it
answers with bytes it builds itself rather than a response model FastAPI
would validate again; the response models still document it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import orjson
from fastapi import APIRouter, Header
from pydantic import ValidationError
from starlette.responses import Response
from starlette.types import Scope

import shardmap
from cluster.api.batches import Results, fill_results, item_failure, json_response
from cluster.api.context import ApiContext, Ctx, Owner
from cluster.api.openapi import problem_responses
from cluster.api.problems import problem_for, problem_response
from cluster.api.schemas import (
    AttemptOut,
    BatchCreateJobsIn,
    BatchCreateJobsOut,
    BatchJobIn,
    CreateJobIn,
    CreateJobOut,
    JobOut,
    PatchJobIn,
    ValidBatchCreateJobsIn,
)
from cluster.errors import VakitError
from cluster.instants import parse_instant, utc
from cluster.model import CreateResult, JobRecord
from cluster.services import jobs as job_service
from cluster.services.jobs import job_id_text, parse_job_id

__all__ = [
    "BATCH_PATH", "CREATE_PATH", "create_batch_fast", "create_fast", "job_id_text", "job_out",
    "parse_job_id", "router",
]  # fmt: skip

router = APIRouter(tags=["jobs"])


def _untraced(target: dict[str, Any]) -> dict[str, Any]:
    """The target as the client gave it: the stored trace context is ours."""
    return {k: v for k, v in target.items() if k != "traceparent"}


def job_out(job: JobRecord, shard: int) -> JobOut:
    return JobOut(
        jobId=job_id_text(job.id),
        type=job.type,
        status=job.status.value,
        runAt=job.run_at,
        scheduledFor=job.scheduled_for,
        attempt=job.attempt,
        maxAttempts=job.max_attempts,
        timeoutSeconds=job.timeout_seconds,
        shard=shard,
        target=job.target if "traceparent" not in job.target else _untraced(job.target),
        payload=job.payload,
        lastError=job.last_error,
        idempotencyKey=job.idempotency_key,
        cronJobId=shardmap.encode_id("cron", job.cron_id) if job.cron_id else None,
        createdAt=job.created_at,
        finishedAt=job.finished_at,
        attempts=[
            AttemptOut(
                attempt=a.attempt,
                worker=a.worker,
                startedAt=a.started_at,
                finishedAt=a.finished_at,
                outcome=a.outcome,
                error=a.error,
                latenessSeconds=a.lateness_seconds,
            )
            for a in job.attempts
        ],
        paused=job.paused_at is not None,
        pausedAt=job.paused_at,
        pauseReason=job.pause_reason,
        labels=job.labels or {},
    )


async def create_job(
    body: CreateJobIn,
    ctx: Ctx,
    owner: Owner,
    idempotency_key: str | None = Header(None, alias="Idempotency-Key"),
) -> Response:
    """Schedule a one-shot job. A repeat with the same ``Idempotency-Key``
    returns the first job (200) and creates nothing."""
    return await _create_one(ctx, owner, body, idempotency_key)


async def _create_one(
    ctx: ApiContext, owner: str, body: CreateJobIn, idempotency_key: str | None
) -> Response:
    result = await job_service.create_job(ctx, owner, body, idempotency_key)
    out = {"jobId": job_id_text(result.job.id), "status": result.job.status.value}
    if result.created:
        return json_response(out, 201)
    response = json_response(out, 200)
    # What the draft suggests to tell a replay from a first answer.
    response.headers["Idempotent-Replayed"] = "true"
    return response


CREATE_PATH = "/api/v1/jobs"
BATCH_PATH = "/api/v1/jobs:batch"


def _fast_head(scope: Scope) -> tuple[bool, str | None, str | None]:
    """What a fast path reads of a request's head, in one pass over the
    headers: whether the body is JSON, the Authorization header and the
    Idempotency-Key (the first of a repeated header, as Starlette reads it)."""
    content_type = authorization = key = None
    for name, value in scope["headers"]:
        if name == b"content-type":
            content_type = value if content_type is None else content_type
        elif name == b"authorization":
            authorization = value.decode("latin-1") if authorization is None else authorization
        elif name == b"idempotency-key":
            key = value.decode("latin-1") if key is None else key
    json_body = (
        content_type is not None
        and content_type.partition(b";")[0].strip().lower() == b"application/json"
    )
    return json_body, authorization, key


def _fast_query(scope: Scope) -> tuple[bool, str | None]:
    """Whether the fast path may take the query string, and the ``owner`` it
    names. An operator acting for an owner says so in the query string; the
    usual create has none, and parses nothing here. Any other parameter, or
    an ``owner`` the declared route refuses, is the declared route's to
    answer (a 422)."""
    if not scope["query_string"]:
        return True, None
    query = parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True)
    acting_for = query["owner"][-1] if "owner" in query else None
    plain = query.keys() <= {"owner"} and (acting_for is None or 1 <= len(acting_for) <= 64)
    return plain, acting_for


async def create_fast(ctx: ApiContext, scope: Scope, body: bytes) -> Response | None:
    """The create's fast path, for the common request: a JSON body that
    validates. ``None`` for anything else, which FastAPI's declared route
    then answers (so every error answer, and the OpenAPI document, are the
    declared endpoint's).

    The API middleware calls this before FastAPI's stack: its generic
    request handling (the middleware layers, routing, solving the
    dependencies, reading each declared header, decoding the JSON, then
    validating it) was most of a create's CPU in the application. Here it
    is one ``model_validate_json`` and one pass over the headers. The
    caller has not written anything yet when this returns ``None``; once a
    body validated, errors are answered here as problem+json, the same
    translation FastAPI's handlers make."""
    json_body, authorization, key = _fast_head(scope)
    plain, acting_for = _fast_query(scope)
    if not (json_body and plain):
        return None
    try:
        job = CreateJobIn.model_validate_json(body)
    except ValidationError:
        return None
    try:
        return await _create_one(ctx, ctx.owner_for(authorization, acting_for), job, key)
    except VakitError as exc:
        return problem_response(*problem_for(exc, where=CREATE_PATH))


router.add_api_route(
    CREATE_PATH,
    create_job,
    methods=["POST"],
    status_code=201,
    response_model=CreateJobOut,
    responses={
        200: {"model": CreateJobOut, "description": "An idempotent repeat."},
        **problem_responses(409),
    },
)


@router.post(
    BATCH_PATH,
    response_model=BatchCreateJobsOut,
    responses={
        200: {
            "description": "One result per job, in request order; each job succeeds or "
            "fails on its own (201 created, 200 repeat, 409, 413, 422, 503…)."
        }
    },
)
async def create_jobs_batch(body: BatchCreateJobsIn, ctx: Ctx, owner: Owner) -> Response:
    """Schedule up to 1,000 jobs, each with its own optional ``idempotencyKey``
    and its own result, written with one statement per shard.

    Never all-or-nothing: a bad job gets its own problem and the others are
    created. A job without a key goes to a random shard and is not retried on
    another one when that shard is unavailable (503): its write may have
    committed. Sending the whole batch again with keys is safe."""
    return await _create_batch(ctx, owner, body.jobs)


async def create_batch_fast(ctx: ApiContext, scope: Scope, body: bytes) -> Response | None:
    """The batch create's fast path, as :func:`create_fast` is the single
    create's. A batch whose every item is valid is validated whole, in one
    pass over its text (:class:`ValidBatchCreateJobsIn`). Any other is
    parsed with orjson and checked against the route's envelope model, then
    each item validated as the route does (4.8 against 7.7 us an item
    through FastAPI's decoding); a body that fails either step, ``None``,
    and the declared route answers it."""
    json_body, authorization, _ = _fast_head(scope)
    plain, acting_for = _fast_query(scope)
    if not (json_body and plain):
        return None
    jobs: list[Any]
    try:
        jobs = ValidBatchCreateJobsIn.model_validate_json(body).jobs
    except ValidationError:
        try:
            # The envelope's rules are the route's model's; its items are
            # taken as they are (each is validated on its own in _create_batch).
            jobs = BatchCreateJobsIn.model_validate(orjson.loads(body)).jobs
        except (orjson.JSONDecodeError, ValidationError):
            return None
    try:
        return await _create_batch(ctx, ctx.owner_for(authorization, acting_for), jobs)
    except VakitError as exc:
        return problem_response(*problem_for(exc, where=BATCH_PATH))


async def _create_batch(ctx: ApiContext, owner: str, items: list[Any]) -> Response:
    where = BATCH_PATH
    results: Results = [None] * len(items)
    valid: list[tuple[int, BatchJobIn]] = []
    for index, raw in enumerate(items):
        try:
            valid.append(
                (index, raw if type(raw) is BatchJobIn else BatchJobIn.model_validate(raw))
            )
        except ValidationError as exc:
            results[index] = item_failure(index, exc, where)
    outcomes = await job_service.create_jobs(ctx, owner, valid)

    def created(index: int, outcome: CreateResult) -> dict[str, Any]:
        return {
            "index": index,
            "status": 201 if outcome.created else 200,
            "jobId": job_id_text(outcome.job.id),
            "jobStatus": outcome.job.status.value,
        }

    fill_results(outcomes, created, results, where)
    return json_response({"results": results})


@router.get("/api/v1/jobs/{job_id}", response_model=JobOut)
async def get_job(job_id: str, ctx: Ctx, owner: Owner) -> JobOut:
    """A job wherever it lives (pending, running or finished), with its attempts."""
    return job_out(*await job_service.get_job(ctx, owner, job_id))


@router.patch("/api/v1/jobs/{job_id}", response_model=JobOut, responses=problem_responses(409))
async def patch_job(job_id: str, body: PatchJobIn, ctx: Ctx, owner: Owner) -> JobOut:
    """Move ``runAt``; only while the job is SCHEDULED, else 409."""
    run_at = utc(parse_instant(body.runAt, "runAt"))
    return job_out(*await job_service.reschedule_job(ctx, owner, job_id, run_at))


@router.delete("/api/v1/jobs/{job_id}", response_model=JobOut, responses=problem_responses(409))
async def delete_job(job_id: str, ctx: Ctx, owner: Owner) -> JobOut:
    """Cancel a job that has not started; 409 once it has."""
    return job_out(*await job_service.cancel_job(ctx, owner, job_id))
