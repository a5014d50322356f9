"""The HTTP API: the FastAPI application, its middleware and its lifespan.

Stateless: any number of replicas serve the same shards. The routes live in
one router per resource (:mod:`.jobs`, :mod:`.crons`, :mod:`.ops`); errors
become ``application/problem+json`` in :mod:`.problems`. The application
depends only on the storage and coordination contracts: the composition
(:func:`cluster.processes.run_api`, the tests) hands it a store, a cron store
and, with ZooKeeper, a factory for the cluster view.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any
from wsgiref.simple_server import WSGIServer

from fastapi import Depends, FastAPI
from prometheus_client import start_http_server
from prometheus_client.metrics import Counter, Histogram
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cluster import __version__, logs, metrics, tracing
from cluster.api import calendars as calendar_routes
from cluster.api import console, cron_actions, job_actions
from cluster.api import crons as cron_routes
from cluster.api import jobs as job_routes
from cluster.api import limits as limit_routes
from cluster.api import ops as ops_routes
from cluster.api import shards as shard_routes
from cluster.api.context import ApiContext, known_query
from cluster.api.openapi import install_openapi, operation_id
from cluster.api.problems import (
    install_handlers,
    problem_for,
    problem_response,
    strict_json_problem,
)
from cluster.api.problems import pages as problem_pages
from cluster.api.strictjson import StrictJsonError, check_body, check_query
from cluster.clock import Clock, SystemClock
from cluster.config import Settings
from cluster.coordination.base import ClusterView
from cluster.errors import Overloaded, PayloadTooLarge, VakitError
from cluster.looplag import watch_event_loop
from cluster.resharding.port import Resharding
from cluster.store import deadline as shard_waits
from cluster.store.contracts.api import ApiJobStore
from cluster.store.contracts.cron_intake import CronIntake

__all__ = ["ApiContext", "create_app"]

log = logging.getLogger(__name__)
# How long a starting API waits for the first per-owner count (quotas.py).
_FIRST_COUNT_SECONDS = 2.0
# Request ids of this process when the caller sends none: short, unique, cheap.
_PROCESS_TAG = secrets.token_hex(3)
_REQUEST_IDS = itertools.count(1)
# A batch carries up to 1,000 jobs: its body may be this large.
BATCH_MAX_BYTES = 16 * 1024 * 1024
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
# In the scope of a request a fast route turned down: the ASGI app serves it
# through FastAPI's declared route without asking the fast route again.
_DECLINED = "vakit.fast_route_declined"


def create_app(
    settings: Settings,
    *,
    store: ApiJobStore,
    crons: CronIntake,
    clock: Clock | None = None,
    view_factory: Callable[[], ClusterView] | None = None,
    latest_schema_version: int | None = None,
    resharding: Callable[[ApiContext], Resharding] | None = None,
) -> FastAPI:
    """The API on ``store`` and ``crons``; the lifespan opens and closes the
    store. ``view_factory`` makes an unstarted cluster view (ZooKeeper); the
    API serves jobs without it and connects it in the background.
    ``latest_schema_version`` defaults to the store's."""
    ctx = ApiContext(
        settings,
        store,
        crons,
        clock or SystemClock(),
        view_factory=view_factory,
        latest_schema_version=latest_schema_version,
    )
    if resharding is not None:
        ctx.resharding = resharding(ctx)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await store.open()
        if ctx.resharding is not None:
            # Routes by the slot map in ZooKeeper from the first request on.
            await ctx.resharding.start()
        connecting = asyncio.create_task(_connect_view(ctx)) if view_factory else None
        metrics_server = _serve_metrics(settings, ctx)
        lag = asyncio.create_task(watch_event_loop())
        # The per-owner quotas count from the shards before the first request:
        # a process that has just started must not admit an owner's creates as
        # if it had none. Bounded: a shard that does not answer leaves the
        # count to the background loop.
        with suppress(TimeoutError):
            await asyncio.wait_for(ctx.limits.refresh(store, crons), _FIRST_COUNT_SECONDS)
        counting = asyncio.create_task(ctx.limits.run(store, crons, counted=True))
        try:
            yield
        finally:
            counting.cancel()
            lag.cancel()
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()
            if connecting is not None:
                connecting.cancel()
            if ctx.view is not None:
                await asyncio.to_thread(ctx.view.stop)
            if ctx.resharding is not None:
                await ctx.resharding.stop()
            await store.close()

    app = VakitApp(
        title="Vakit",
        version=__version__,
        description="Sharded, distributed job scheduler: one-shot delayed jobs and cron jobs "
        "that fire HTTP endpoints and Kafka topics, at least once, with what a target needs "
        "to make the effect happen once (jobId, scheduledFor, attempt). Errors are "
        "application/problem+json (RFC 9457) with a stable `type` per kind of error, "
        "served as its page at that path.",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        # /docs is the console's (vendored Swagger UI); ReDoc would load from a CDN.
        docs_url=None,
        redoc_url=None,
        # Spans and metrics are Vakit's own (cluster.tracing, /metrics): with
        # FastAPI's native telemetry on as well, a traced deployment would get
        # every server span twice. Off, it also stops FastAPI asking
        # OpenTelemetry for its providers on each request (environment
        # lookups, 6 % of a single create's API CPU).
        telemetry={"tracing": False, "metrics": False, "logs": False},
        dependencies=[Depends(known_query)],
    )
    install_openapi(app)
    app.state.ctx = ctx
    install_handlers(app)
    app.accounting = RequestAccounting(
        super(VakitApp, app).__call__,
        settings=settings,
        fast_routes={
            ("POST", job_routes.CREATE_PATH): functools.partial(job_routes.create_fast, ctx),
            ("POST", job_routes.BATCH_PATH): functools.partial(job_routes.create_batch_fast, ctx),
        },
    )
    # In this order: the OpenAPI document lists the operations as registered.
    for routes in (job_routes, job_actions, ops_routes, cron_routes, cron_actions,
                   calendar_routes, shard_routes, limit_routes):  # fmt: skip
        app.include_router(routes.router)
    app.include_router(problem_pages)
    console.install(app)
    return app


def _serve_metrics(settings: Settings, ctx: ApiContext) -> WSGIServer | None:
    """``/metrics`` without a token on ``metrics_host:api_metrics_port``, when
    set: the interface (loopback, a scrape network) is what protects it. A
    thread of its own, so a scrape costs the event loop nothing."""
    if settings.api_metrics_port is None:
        return None
    server, _ = start_http_server(settings.api_metrics_port, addr=settings.metrics_host)
    ctx.metrics_port = server.server_port
    log.info("metrics served", extra={"host": settings.metrics_host, "port": ctx.metrics_port})
    return server


async def _connect_view(ctx: ApiContext) -> None:
    """The cluster view connects in the background and is used once it has."""
    assert ctx.view_factory is not None
    while True:
        view = ctx.view_factory()
        try:
            await asyncio.to_thread(view.start)
            ctx.view = view
            return
        except VakitError as exc:
            log.warning("cluster view: ZooKeeper unreachable, retrying: %s", exc)
            await asyncio.sleep(2.0)


FastRoute = Callable[[Scope, bytes], Awaitable[Response | None]]


class VakitApp(FastAPI):
    """FastAPI behind :class:`RequestAccounting`: every request is refused,
    counted and timed there, and the hot routes are answered there, before
    Starlette's stack (its error middleware, FastAPI's body-limit and
    telemetry layers, routing: 5 % of a single create's API CPU). What is
    not a fast route goes through that stack as before."""

    accounting: RequestAccounting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.accounting(scope, receive, send)


def _request_id(scope: Scope) -> str:
    """The caller's X-Request-Id (first 64 characters), else one of ours."""
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            return str(value[:64].decode("latin-1"))
    return f"{_PROCESS_TAG}-{next(_REQUEST_IDS)}"


class RequestAccounting:
    """Refuses what must not be served (too large, too many at once) and
    counts and times every request.

    A plain ASGI middleware: Starlette's ``BaseHTTPMiddleware`` (what
    ``@app.middleware`` makes) runs each request in a task group with
    streams in between, a good part of a create's CPU.

    ``fast_routes`` serve the hot requests (a single create) before
    FastAPI's stack: given the scope and the whole body, one answers, or
    returns ``None`` before doing anything and FastAPI's declared route
    serves the request (the body is handed on).

    The API's HTTP protocol (:mod:`.server`) asks :meth:`fast_route` of a
    request's head and :meth:`answer` of its body, and writes the answer
    itself, without the ASGI cycle; what they turn down comes here through
    the ASGI app as any other request."""

    def __init__(
        self,
        app: ASGIApp,
        settings: Settings,
        fast_routes: dict[tuple[str, str], FastRoute] | None = None,
    ) -> None:
        self.app = app
        self.fast_routes = fast_routes or {}
        self.max_body = settings.max_payload_bytes + 16 * 1024
        self.max_batch_body = max(self.max_body, BATCH_MAX_BYTES)
        self.max_in_flight = settings.api_max_concurrency
        # A request's wait on a shard (a frozen one answers nothing): its
        # store calls get this long, not the workers' bound.
        self.shard_bound = settings.api_shard_timeout
        self.in_flight = 0
        # Metric children by labels: .labels() takes a lock and hashes per call.
        self._children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    async def _traced(
        self, scope: Scope, receive: Receive, send: Send, fast: FastRoute | None, body: bytes | None
    ) -> None:
        """The request as a server span, continuing the caller's trace."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        with tracing.span(
            f"{scope['method']} {scope['path']}",
            kind="server",
            headers=headers,
            attributes={"http.request.method": scope["method"], "url.path": scope["path"],
                        "vakit.request_id": logs.context().get("request_id", "")},
        ) as span:  # fmt: skip
            status = 0

            async def send_traced(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                if fast is not None and body is not None:
                    await self._serve_fast(fast, scope, body, receive, send_traced)
                else:
                    await self.app(scope, receive, send_traced)
            finally:
                route = scope.get("route")
                if route is not None:
                    span.update_name(f"{scope['method']} {route.path}")
                    span.set_attribute("http.route", route.path)
                span.set_attribute("http.response.status_code", status)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what an exception that escapes the app becomes
        path: str = scope["path"]
        route_label: str | None = None

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            refusal = self._refusal(scope, path)
            if refusal is not None:
                await problem_response(*refusal)(scope, receive, send_status)
                return
            self.in_flight += 1
            token = logs.bind(request_id=_request_id(scope))
            bound = shard_waits.bind(self.shard_bound)
            try:
                body: bytes | None = None
                if scope["method"] in _WITH_BODY:
                    try:
                        body = await self._checked_body(path, receive)
                    except PayloadTooLarge as exc:
                        await problem_response(*problem_for(exc))(scope, receive, send_status)
                        return
                    except StrictJsonError as exc:
                        await problem_response(strict_json_problem(exc))(
                            scope, receive, send_status
                        )
                        return
                fast = self.fast_routes.get((scope["method"], path))
                if fast is not None and body is not None and _DECLINED not in scope:
                    route_label = path
                else:
                    fast = None
                    if body is not None:
                        receive = _replay(body, receive)
                if tracing.ENABLED:
                    await self._traced(scope, receive, send_status, fast, body)
                elif fast is not None and body is not None:
                    await self._serve_fast(fast, scope, body, receive, send_status)
                else:
                    await self.app(scope, receive, send_status)
            finally:
                self.in_flight -= 1
                shard_waits.unbind(bound)
                logs.unbind(token)
        finally:
            method = scope["method"]
            if method not in _METHODS:
                method = "other"  # any token a client sends would be a new series
            if route_label is None:
                route_label = getattr(scope.get("route"), "path", "unmatched")
            counter, timer = self._child(method, route_label, status)
            counter.inc()
            timer.observe(time.perf_counter() - started)

    def fast_route(self, scope: Scope) -> FastRoute | None:
        """The fast route that may answer this request, from its head alone;
        ``None`` for the ASGI app: other routes, what is refused, and every
        request while tracing (the server span is :meth:`_traced`'s)."""
        if tracing.ENABLED:
            return None
        fast = self.fast_routes.get((scope["method"], scope["path"]))
        if fast is None or self._refusal(scope, scope["path"]) is not None:
            return None
        return fast

    def body_limit(self, path: str) -> int:
        return self.max_batch_body if path.endswith(":batch") else self.max_body

    async def answer(self, scope: Scope, body: bytes, fast: FastRoute) -> Response | None:
        """``fast``'s answer to a request read whole, counted and timed as
        :meth:`__call__` counts every request, for the caller to write.
        ``None``, having done nothing: a body the strict JSON rules refuse,
        or one the route declines. The caller then hands the request to
        the ASGI app, which answers it (marked, so the route is not asked
        twice)."""
        started = time.perf_counter()
        try:
            check_body(body)
        except StrictJsonError:
            scope[_DECLINED] = True
            return None
        self.in_flight += 1
        token = logs.bind(request_id=_request_id(scope))
        bound = shard_waits.bind(self.shard_bound)
        try:
            response = await self._answer_fast(fast, scope, body)
        finally:
            self.in_flight -= 1
            shard_waits.unbind(bound)
            logs.unbind(token)
        if response is None:
            scope[_DECLINED] = True
            return None
        counter, timer = self._child(scope["method"], scope["path"], response.status_code)
        counter.inc()
        timer.observe(time.perf_counter() - started)
        return response

    def _refusal(self, scope: Scope, path: str) -> tuple[dict[str, Any], dict[str, str]] | None:
        """What is refused before the app sees the request, from its head alone."""
        length = _content_length(scope)
        limit = self.body_limit(path)
        if length is not None and length > limit:
            too_large = PayloadTooLarge(
                f"request body is larger than {limit} bytes", size=length, limit=limit
            )
            return problem_for(too_large)
        if self.in_flight >= self.max_in_flight and path.startswith("/api/"):
            # Overload is refused early and cheaply, with a hint when to
            # come back, rather than queued until every client times out.
            busy = Overloaded(
                "this API process is at its concurrency limit; retry shortly", retry_after=1
            )
            return problem_for(busy)
        try:
            check_query(scope["query_string"])
        except StrictJsonError as exc:
            return strict_json_problem(exc), {}
        return None

    async def _checked_body(self, path: str, receive: Receive) -> bytes:
        """The body read here, counted as it arrives (a chunked body says
        nothing of its size up front: past the limit it is refused without
        reading the rest), checked once against the strict JSON rules, and
        handed to the app whole.

        Every route reads its body whole anyway, so reading it here costs
        one message's hand-off, and every route gets the same limit and
        the same rules, whichever way it parses."""
        limit = self.body_limit(path)
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                break
            chunk: bytes = message.get("body", b"")
            seen += len(chunk)
            if seen > limit:
                raise PayloadTooLarge(f"request body is larger than {limit} bytes", limit=limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        check_body(body)
        return body

    def _child(self, method: str, route: str, status: int) -> tuple[Counter, Histogram]:
        key = (method, route, status)
        child = self._children.get(key)
        if child is None:
            child = (
                metrics.API_REQUESTS.labels(method, route, str(status)),
                metrics.API_REQUEST_SECONDS.labels(method, route),
            )
            if len(self._children) < 10_000:  # methods come from clients: bounded
                self._children[key] = child
        return child

    async def _serve_fast(
        self, fast: FastRoute, scope: Scope, body: bytes, receive: Receive, send: Send
    ) -> None:
        response = await self._answer_fast(fast, scope, body)
        if response is None:
            await self.app(scope, _replay(body, receive), send)
        else:
            await response(scope, receive, send)

    @staticmethod
    async def _answer_fast(fast: FastRoute, scope: Scope, body: bytes) -> Response | None:
        try:
            return await fast(scope, body)
        except Exception as exc:
            # Outside Starlette's error middleware: the answer (and the log
            # line) its handler for the unexpected gives; nothing is written yet.
            return problem_response(*problem_for(exc, where=scope["path"]))


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for an app that reads a body already read: the body
    first, then whatever the client sends next (a disconnect)."""
    pending: Message | None = {"type": "http.request", "body": body, "more_body": False}

    async def replay() -> Message:
        nonlocal pending
        if pending is not None:
            message, pending = pending, None
            return message
        return await receive()

    return replay


def _content_length(scope: Scope) -> int | None:
    headers: Any = scope["headers"]
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None
