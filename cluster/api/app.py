"""The HTTP API under ``/api/v1``, plus ``/metrics``, ``/healthz``, ``/readyz``.

Stateless: any number of replicas serve the same shards. Errors are
``application/problem+json`` (RFC 9457) with a message a person can act on.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from fastapi import Depends, FastAPI, Header, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

import shardmap
from cluster import metrics
from cluster.api.schemas import (
    AttemptOut,
    CreateJobIn,
    CreateJobOut,
    JobOut,
    PatchJobIn,
    fingerprint,
    parse_rfc3339,
)
from cluster.clock import Clock, SystemClock, utc
from cluster.config import Settings
from cluster.errors import InvalidRequest, NotFound, ShardUnavailable, Unauthorized, VakitError
from cluster.model import CancelParams, CreateJobParams, GetJobParams, JobRecord, RescheduleParams
from cluster.store.postgres import PgStore
from cluster.targets.policy import AddressPolicy, TargetRefused

__all__ = ["ApiContext", "create_app", "job_out"]

log = logging.getLogger(__name__)
PROBLEM = "application/problem+json"


def problem(status: int, title: str, detail: str, **fields: Any) -> JSONResponse:
    # Extension members never override the standard ones (RFC 9457).
    body = {**fields, "type": "about:blank", "title": title, "status": status, "detail": detail}
    headers = {}
    if "retry_after" in fields:
        headers["Retry-After"] = str(fields.pop("retry_after"))
        body.pop("retry_after", None)
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


class ApiContext:
    """What the handlers share: settings, the store, the clock, the policy."""

    def __init__(self, settings: Settings, store: PgStore, clock: Clock) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.shards = shardmap.ShardMap(store.shard_count)
        self.policy = AddressPolicy.from_list(
            settings.http_target_allow, allow_private=settings.allow_private_targets
        )
        self.tokens = dict(settings.api_tokens)
        self.view: Any = None  # ZkClusterView when ZooKeeper is configured

    def owner_for(self, authorization: str | None) -> str:
        if not authorization:
            raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("Authorization must be 'Bearer <token>'")
        token = token.strip()
        owner = None
        for known, svc in self.tokens.items():
            # Constant-time compare; a lookup would leak token prefixes by timing.
            if hmac.compare_digest(known.encode(), token.encode()):
                owner = svc
        if owner is None:
            raise Unauthorized("unknown token")
        return owner


def job_id_text(value: uuid.UUID) -> str:
    return shardmap.encode_id("job", value)


def parse_job_id(text: str) -> uuid.UUID:
    try:
        return shardmap.decode_id("job", text)
    except ValueError as exc:
        raise NotFound(str(exc)) from exc


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
        target=job.target,
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
    )


def create_app(
    settings: Settings,
    *,
    store: PgStore | None = None,
    clock: Clock | None = None,
) -> FastAPI:
    store = store or PgStore(
        settings.shards,
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        timeout=settings.connect_timeout,
        name="vakit-api",
    )
    ctx = ApiContext(settings, store, clock or SystemClock())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await store.open()
        connecting = asyncio.create_task(connect_view()) if settings.zk else None
        try:
            yield
        finally:
            if connecting is not None:
                connecting.cancel()
            if ctx.view is not None:
                await asyncio.to_thread(ctx.view.stop)
            await store.close()

    async def connect_view() -> None:
        """The API serves jobs without ZooKeeper; its cluster view connects in
        the background and is used once it has."""
        from cluster.coordination.view import ZkClusterView

        assert settings.zk
        while True:
            view = ZkClusterView(settings.zk)
            try:
                await asyncio.to_thread(view.start)
                ctx.view = view
                return
            except VakitError as exc:
                log.warning("cluster view: ZooKeeper unreachable, retrying: %s", exc)
                await asyncio.sleep(2.0)

    app = FastAPI(
        title="Vakit",
        version="0.1.0",
        description="Sharded, distributed job scheduler: one-shot delayed jobs and cron jobs "
        "that fire HTTP endpoints and Kafka topics, at least once, with what a target needs "
        "to make the effect happen once (jobId, scheduledFor, attempt).",
        lifespan=lifespan,
    )
    app.state.ctx = ctx

    # -- errors --------------------------------------------------------------

    @app.exception_handler(VakitError)
    async def _vakit_error(request: Request, exc: VakitError) -> JSONResponse:
        fields = {k: v for k, v in exc.fields.items()}
        if isinstance(exc, ShardUnavailable):
            fields["retry_after"] = exc.retry_after
            log.warning("shard unavailable", extra={"shard": exc.shard, "path": request.url.path})
        headers_extra = {}
        if exc.status == 401:
            headers_extra["WWW-Authenticate"] = "Bearer"
        resp = problem(exc.status, exc.title, exc.message, **fields)
        resp.headers.update(headers_extra)
        return resp

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": ".".join(str(p) for p in e.get("loc", ()) if p != "body"), "message": e.get("msg", "")}
            for e in exc.errors()
        ]
        if any(e.get("type") == "json_invalid" for e in exc.errors()):
            return problem(400, "Malformed JSON", "the request body is not valid JSON", errors=errors)
        first = errors[0] if errors else {"field": "", "message": "invalid request"}
        detail = f"{first['field']}: {first['message']}" if first["field"] else first["message"]
        return problem(422, "Invalid request", detail, errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem(exc.status_code, str(exc.detail), str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", extra={"path": request.url.path})
        return problem(500, "Internal error", "an unexpected error occurred; it has been logged")

    # -- request accounting and body limit ----------------------------------

    max_body = settings.max_payload_bytes + 16 * 1024
    in_flight = 0

    @app.middleware("http")
    async def _account(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        nonlocal in_flight
        started = time.perf_counter()
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > max_body:
            response: Response = problem(
                413, "Payload too large", f"request body is larger than {max_body} bytes"
            )
        elif in_flight >= settings.api_max_concurrency and request.url.path.startswith("/api/"):
            # Overload is refused early and cheaply, with a hint when to come
            # back, rather than queued until every client times out.
            response = problem(
                429,
                "Too many requests",
                "this API process is at its concurrency limit; retry shortly",
                retry_after=1,
            )
        else:
            in_flight += 1
            try:
                response = await call_next(request)
            finally:
                in_flight -= 1
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        metrics.API_REQUESTS.labels(request.method, path, str(response.status_code)).inc()
        metrics.API_REQUEST_SECONDS.labels(request.method, path).observe(
            time.perf_counter() - started
        )
        return response

    def owner(authorization: str | None = Header(None)) -> str:
        return ctx.owner_for(authorization)

    # -- jobs ------------------------------------------------------------------

    @app.post(
        "/api/v1/jobs",
        status_code=201,
        response_model=CreateJobOut,
        responses={200: {"model": CreateJobOut, "description": "An idempotent repeat."}},
        tags=["jobs"],
    )
    async def create_job(
        body: CreateJobIn,
        response: Response,
        owner: str = Depends(owner),
        idempotency_key: str | None = Header(None, alias="Idempotency-Key"),
    ) -> CreateJobOut:
        """Schedule a one-shot job. A repeat with the same ``Idempotency-Key``
        returns the first job (200) and creates nothing."""
        if idempotency_key is not None and not 1 <= len(idempotency_key) <= 200:
            raise InvalidRequest("Idempotency-Key must be 1 to 200 characters")
        run_at = utc(body.run_at())
        target = body.target.model_dump(exclude_none=True)
        check_target(ctx, target)
        payload_size = len(json.dumps(body.payload, separators=(",", ":")))
        if payload_size > settings.max_payload_bytes:
            raise_payload_too_large(payload_size, settings.max_payload_bytes)
        far = run_at > ctx.clock.now() + timedelta(seconds=settings.far_horizon_seconds)

        def params_for(slot: int | None) -> CreateJobParams:
            return CreateJobParams(
                id=shardmap.new_uuid(slot),
                owner=owner,
                type=body.type,
                run_at=run_at,
                scheduled_for=run_at,
                target=target,
                payload=body.payload,
                max_attempts=body.maxAttempts,
                timeout_seconds=body.timeoutSeconds,
                idempotency_key=idempotency_key,
                fingerprint=fingerprint(body) if idempotency_key is not None else None,
                far=far,
            )

        if idempotency_key is not None:
            params = params_for(shardmap.key_slot(owner, idempotency_key))
            result = await store.create_job(ctx.shards.shard_of(params.id), params)
        else:
            result = await create_anywhere(ctx, params_for)
        if not result.created:
            response.status_code = 200
        return CreateJobOut(jobId=job_id_text(result.job.id), status=result.job.status.value)

    @app.get("/api/v1/jobs/{job_id}", response_model=JobOut, tags=["jobs"])
    async def get_job(job_id: str, owner: str = Depends(owner)) -> JobOut:
        """A job wherever it lives (pending, running or finished), with its attempts."""
        jid = parse_job_id(job_id)
        shard = ctx.shards.shard_of(jid)
        job = await store.get_job(shard, GetJobParams(jid, owner))
        if job is None:
            raise NotFound("no such job", job_id=job_id)
        return job_out(job, shard)

    @app.patch("/api/v1/jobs/{job_id}", response_model=JobOut, tags=["jobs"])
    async def patch_job(job_id: str, body: PatchJobIn, owner: str = Depends(owner)) -> JobOut:
        """Move ``runAt``; only while the job is SCHEDULED, else 409."""
        jid = parse_job_id(job_id)
        shard = ctx.shards.shard_of(jid)
        run_at = utc(parse_rfc3339(body.runAt, "runAt"))
        job = await store.reschedule_job(shard, RescheduleParams(jid, owner, run_at))
        return job_out(job, shard)

    @app.delete("/api/v1/jobs/{job_id}", response_model=JobOut, tags=["jobs"])
    async def delete_job(job_id: str, owner: str = Depends(owner)) -> JobOut:
        """Cancel a job that has not started; 409 once it has."""
        jid = parse_job_id(job_id)
        shard = ctx.shards.shard_of(jid)
        job = await store.cancel_job(shard, CancelParams(jid, owner))
        return job_out(job, shard)

    # -- operations ------------------------------------------------------------

    @app.get("/healthz", tags=["operations"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"])
    async def readyz() -> JSONResponse:
        """200 once every shard is reachable and migrated and has a polling worker."""
        from cluster.store.migrate import LATEST_VERSION

        report = await shard_readiness(store, LATEST_VERSION)
        ready = all(s["ready"] for s in report)
        return JSONResponse({"ready": ready, "shards": report}, status_code=200 if ready else 503)

    @app.get("/api/v1/cluster", tags=["operations"])
    async def cluster_view(owner: str = Depends(owner)) -> dict[str, Any]:
        """Members, shard owners and leaders, backlog and oldest due age per shard."""
        from cluster.coordination.report import cluster_status

        return await cluster_status(settings, store, ctx.view, may_connect=False)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    from cluster.api.crons import register_cron_routes

    register_cron_routes(app, ctx, owner)
    return app


def check_target(ctx: ApiContext, target: dict[str, Any]) -> None:
    kind = target["kind"]
    if kind == "HTTP":
        try:
            ctx.policy.check_url(target["url"])
        except TargetRefused as exc:
            raise InvalidRequest(str(exc), field="target.url") from exc
    elif kind == "NOOP" and not ctx.settings.enable_noop_target:
        raise InvalidRequest(
            "the NOOP target is for benchmarks and is disabled (VAKIT_ENABLE_NOOP_TARGET)",
            field="target.kind",
        )
    elif kind == "KAFKA" and not ctx.settings.kafka_bootstrap:
        raise InvalidRequest(
            "no Kafka cluster is configured for this Vakit (VAKIT_KAFKA_BOOTSTRAP)",
            field="target.kind",
        )


def raise_payload_too_large(size: int, limit: int) -> None:
    err = InvalidRequest(f"payload is {size} bytes; the limit is {limit}", field="payload")
    err.status = 413
    err.title = "Payload too large"
    raise err


async def create_anywhere(
    ctx: ApiContext, params_for: Callable[[int | None], CreateJobParams]
) -> Any:
    """A job without a key may live on any shard: when its random shard is
    down, try another, so one shard's outage does not refuse new work."""
    tried: set[int] = set()
    last: ShardUnavailable | None = None
    while len(tried) < ctx.shards.shard_count:
        params = params_for(None)
        shard = ctx.shards.shard_of(params.id)
        if shard in tried:
            continue
        tried.add(shard)
        try:
            return await ctx.store.create_job(shard, params)
        except ShardUnavailable as exc:
            last = exc
    assert last is not None
    raise last


async def shard_readiness(store: PgStore, latest: int) -> list[dict[str, Any]]:
    report = []
    for shard in range(store.shard_count):
        entry: dict[str, Any] = {"shard": shard}
        try:
            version = await store.schema_version(shard)
            workers = await store.workers_seen(shard)
            entry.update(
                migrated=version >= latest, schemaVersion=version, workers=len(workers), reachable=True
            )
        except VakitError as exc:
            entry.update(reachable=False, migrated=False, workers=0, error=exc.message)
        entry["ready"] = bool(entry["reachable"] and entry["migrated"] and entry["workers"] > 0)
        report.append(entry)
    return report
