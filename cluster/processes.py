"""Wiring for the long-running processes: ``vakit api`` and ``vakit worker``."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

import cluster
from cluster import metrics
from cluster.clock import AnchoredClock
from cluster.config import Settings
from cluster.coordination.base import Member, StaticCoordinator
from cluster.errors import VakitError
from cluster.leader.backlog import BacklogProbe
from cluster.leader.janitor import Janitor
from cluster.leader.loop import LeaderLoop
from cluster.leader.materializer import FOLD_DEFER_BACKLOG, Materializer
from cluster.leader.mover import Mover
from cluster.leader.reaper import Reaper
from cluster.looplag import watch_event_loop
from cluster.model import BacklogParams
from cluster.store.postgres import PgStore
from cluster.store.postgres_cron import PgCronStore
from cluster.targets import Target
from cluster.targets.kinds import KINDS
from cluster.targets.registry import TargetEnv
from cluster.worker.worker import Worker, default_worker_id

if TYPE_CHECKING:
    from fastapi import FastAPI

    from cluster.api.context import ApiContext
    from cluster.coordination.zookeeper import ZkCoordinator
    from cluster.resharding.control import ReshardControl
    from cluster.resharding.port import Resharding
    from shardmap import SlotMap

__all__ = [
    "api_app",
    "build_targets",
    "make_coordinator",
    "run_api",
    "run_worker",
    "with_added_shards",
]

log = logging.getLogger(__name__)


def build_targets(settings: Settings) -> dict[str, Target]:
    """A worker's targets: one of each kind this deployment offers."""
    return KINDS.build(TargetEnv.from_settings(settings))


def make_coordinator(settings: Settings, worker_id: str) -> StaticCoordinator | ZkCoordinator:
    if not settings.zk:
        return StaticCoordinator(worker_id, settings.shard_count)
    from datetime import UTC, datetime

    from cluster.coordination.zookeeper import ZkCoordinator

    member = Member(
        id=worker_id,
        host=socket.gethostname(),
        pid=os.getpid(),
        version=cluster.__version__,
        started_at=datetime.now(UTC),
    )
    return ZkCoordinator(
        settings.zk,
        member=member,
        shard_count=settings.shard_count,
        session_timeout=settings.zk_session_timeout,
    )


async def _serve_ops(settings: Settings, ready: Callable[[], bool]) -> web.AppRunner:
    async def metrics_handler(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        ok = ready()
        return web.json_response({"ready": ok}, status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.metrics_host, settings.metrics_port)
    await site.start()
    return runner


def tune_gc() -> None:
    """Garbage-collector settings for a worker that holds many jobs, and for
    the API, whose batches allocate tens of thousands of objects each.

    A worker holding a preloaded wave keeps hundreds of thousands of live
    objects. With CPython's default thresholds (700, 10, 10), the burst of
    allocations when that wave starts triggers full collections that each walk
    every one of them: about 90 ms each, three per 50,000-job wave, all of it
    start lateness. A young generation of 50,000 allocations and a full
    collection at most every 100 of the middle one make that rare; reference
    counting frees almost everything anyway, and young cycles are still
    collected. What exists at start-up (modules, settings) is frozen: no
    collection walks it again.

    In the API, with the default thresholds, a full collection walked the
    whole application (FastAPI, pydantic's schemas, about 110,000 objects)
    every other batch: 16 % of its CPU on a 100,000-job batch create, 75
    against 47 us of API CPU per item with these settings.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


# How often the worker's clock is anchored again to a shard's now(): the
# monotonic clock drifts by parts per million, a wall clock can step by hours.
ANCHOR_SECONDS = 30.0


async def anchor_clock(clock: AnchoredClock, crons: PgCronStore, shard_count: int) -> bool:
    """Anchor ``clock`` at the first shard that answers; False if none did."""
    for shard in range(shard_count):
        try:
            database_now = await crons.database_now(shard)
        except VakitError as exc:
            log.warning("clock anchor: %s", exc, extra={"shard": shard})
            continue
        # Anchored at the end of the round trip: the reading was taken
        # somewhere in it, so the clock is behind the shard by at most the
        # way back, never ahead, and no job is fired before its runAt for it.
        # (At the midpoint, a reading that waited for a pool connection or a
        # stalled shard put the clock ahead by up to half that wait: the
        # fault campaign saw firings up to 0.99 s early;
        # `make run`'s demo, one 1.7 ms early.)
        clock.anchor(database_now, time.monotonic())
        metrics.WORKER_CLOCK_OFFSET.set(clock.offset_seconds())
        return True
    return False


async def keep_anchored(
    clock: AnchoredClock,
    crons: PgCronStore,
    shard_count: int,
    stopping: asyncio.Event,
    anchored: bool,
) -> None:
    """Anchor ``clock`` again every ANCHOR_SECONDS, or every second while no
    shard has answered; ``anchored``: the start-up anchor succeeded."""
    while True:
        try:
            await asyncio.wait_for(stopping.wait(), timeout=ANCHOR_SECONDS if anchored else 1.0)
            return
        except TimeoutError:
            pass
        anchored = await anchor_clock(clock, crons, shard_count)


def with_added_shards(settings: Settings) -> Settings:
    """``settings`` with the shards added to the running cluster (ZooKeeper's
    shard list) after the configured ones: a process started with the old
    ``VAKIT_SHARDS`` still serves them all. Without ZooKeeper, or when it does
    not answer, the configured list as it is."""
    if not settings.zk:
        return settings
    from cluster.coordination.topology import ZkTopology

    topology = ZkTopology(
        settings.zk, settings.shards, timeout=min(5.0, settings.zk_session_timeout)
    )
    try:
        topology.start()
        dsns = topology.shard_dsns()
    except VakitError as exc:
        log.warning("shard list: ZooKeeper did not answer; using VAKIT_SHARDS: %s", exc)
        return settings
    finally:
        topology.stop()
    if len(dsns) > len(settings.shards):
        log.info(
            "shards added to the cluster: %s more than VAKIT_SHARDS",
            len(dsns) - len(settings.shards),
        )
        return settings.model_copy(update={"shards": list(dsns)})
    return settings


def resharding_for(
    settings: Settings,
    store: PgStore,
    *,
    run_mover: bool,
    on_grow: Callable[[int], Coroutine[Any, Any, None]] | None = None,
    on_map: Callable[[SlotMap], None] | None = None,
) -> ReshardControl | None:
    """The process's part in resharding, when ZooKeeper holds the topology."""
    if not settings.zk:
        return None
    from cluster.coordination.topology import ZkTopology
    from cluster.resharding.control import ReshardControl
    from cluster.resharding.mover import MoverSettings
    from cluster.store.postgres.moves import PgSlotMoves

    mover = MoverSettings(
        batch_slots=settings.reshard_batch_slots,
        barrier_timeout=settings.reshard_barrier_timeout,
        wave_window=settings.reshard_wave_window,
        wave_threshold=settings.reshard_wave_threshold,
    )
    return ReshardControl(
        ZkTopology(settings.zk, settings.shards, timeout=settings.zk_session_timeout),
        store,
        PgSlotMoves(store),
        settings=mover,
        run_mover=run_mover,
        on_grow=on_grow,
        on_map=on_map,
    )


def shard_store(
    settings: Settings,
    *,
    name: str = "vakit",
    min_size: int | None = None,
    max_size: int | None = None,
) -> PgStore:
    """The PostgreSQL shards as ``settings`` configure them (pools, timeouts,
    keepalives), for a process of ours: one place, so that a setting read
    by the worker is read by the API and ``vakit status`` too. ``min_size``
    and ``max_size`` override the pool's for a short-lived command."""
    return PgStore(
        settings.shards,
        min_size=settings.pool_min_size if min_size is None else min_size,
        max_size=settings.pool_max_size if max_size is None else max_size,
        timeout=settings.connect_timeout,
        statement_timeout=settings.statement_timeout,
        idle_in_transaction_timeout=settings.idle_in_transaction_timeout,
        keepalive_seconds=settings.tcp_keepalive_seconds,
        name=name,
    )


async def run_worker(settings: Settings) -> None:
    """A worker process: claim loops, heartbeats, leader-only maintenance."""
    worker_id = settings.worker_id or default_worker_id()
    store = shard_store(settings, name=f"worker-{worker_id}")
    await store.open()
    coordinator = make_coordinator(settings, worker_id)
    # kazoo blocks; keep it off the event loop.
    await asyncio.to_thread(coordinator.start)
    targets = build_targets(settings)
    # Per-target and per-cron series only for what the operator declared
    # (the hosts it gave limits to are declared too); the rest are "other".
    metrics.declare_labels(
        targets=[*settings.metrics_targets, *settings.target_limits], crons=settings.metrics_crons
    )
    # The worker holds jobs until their run_at and renews leases by the
    # shards' clock, whatever this host's wall clock says (AnchoredClock).
    clock = AnchoredClock()
    crons = PgCronStore(store)
    anchored = await anchor_clock(clock, crons, store.shard_count)
    worker = Worker(settings, store, coordinator, targets, clock=clock, worker_id=worker_id)
    tune_gc()
    lag = asyncio.create_task(watch_event_loop())
    stopping = asyncio.Event()
    # The start-up anchor above is the first; this one keeps it fresh.
    anchoring = asyncio.create_task(
        keep_anchored(clock, crons, store.shard_count, stopping, anchored)
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    runner = await _serve_ops(settings, worker.polling.is_set)
    n = store.shard_count

    # The materializer asks only "more than FOLD_DEFER_BACKLOG?": counted
    # up to one more than that, not to the backlog probe's cap of a million
    # (80 ms a call in a million-job wave, on every pass while it waits).
    async def due_backlog(shard: int) -> int:
        return (await store.backlog(shard, BacklogParams(cap=FOLD_DEFER_BACKLOG + 1))).due

    materializer = Materializer(
        crons,
        lookahead_seconds=settings.cron_lookahead_seconds,
        max_lookahead_seconds=settings.cron_max_lookahead_seconds,
        misfire_threshold_seconds=settings.cron_misfire_threshold_seconds,
        catchup_cap=settings.cron_catchup_cap,
        page_size=settings.cron_page_size,
        interval_seconds=settings.materializer_interval,
        far_horizon_seconds=settings.far_horizon_seconds,
        max_clock_skew_seconds=settings.cron_max_clock_skew_seconds,
        last_success_interval_seconds=settings.cron_last_success_interval_seconds,
        backlog=due_backlog,
    )
    # The dead-letter metric names these owners (the tenants), any other 'other'.
    tenants = frozenset(settings.api_tokens.values())
    loops = [
        LeaderLoop(Reaper(store, owners=tenants), coordinator, n, settings.reaper_interval),
        LeaderLoop(Mover(store, settings.far_horizon_seconds), coordinator, n, 5.0),
        LeaderLoop(
            Janitor(store, settings.history_retention_days, crons=crons), coordinator, n, 3600.0
        ),
        LeaderLoop(BacklogProbe(store), coordinator, n, 5.0, owners_too=True),
        LeaderLoop(
            materializer,
            coordinator,
            n,
            settings.materializer_interval,
            on_lost=materializer.forget,
            # A cron written due within a minute passes at once, not after
            # the interval: its first slot may be seconds away.
            wakes=crons.cron_soon,
        ),
    ]
    loop_tasks = [asyncio.create_task(lp.run(stopping)) for lp in loops]
    worker.start()

    async def grown(shard_count: int) -> None:
        for shard in range(shard_count):
            worker.add_shard(shard)
        for lp in loops:
            lp.shard_count = shard_count
        await asyncio.to_thread(coordinator.grow, shard_count)

    resharding = resharding_for(
        settings, store, run_mover=False, on_grow=grown, on_map=worker.route_by
    )
    if resharding is not None:
        await resharding.start()
    log.info("worker started", extra={"worker_id": worker_id, "shards": n})
    await stopping.wait()
    started = time.monotonic()
    log.info("worker stopping", extra={"worker_id": worker_id})
    await worker.stop()
    if resharding is not None:
        await resharding.stop()
    await asyncio.gather(*loop_tasks, anchoring, return_exceptions=True)
    for target in targets.values():
        await target.close()
    await asyncio.to_thread(coordinator.stop)
    lag.cancel()
    await runner.cleanup()
    await store.close()
    log.info(
        "worker stopped", extra={"worker_id": worker_id, "seconds": time.monotonic() - started}
    )


def api_app(settings: Settings) -> FastAPI:
    """The API on the PostgreSQL shards, with the ZooKeeper cluster view when
    ZooKeeper is configured: the composition the API itself never makes."""
    from cluster.api.app import create_app
    from cluster.coordination.view import ZkClusterView

    store = shard_store(settings, name="vakit-api")
    zk = settings.zk

    def resharding(ctx: ApiContext) -> Resharding:
        def route_by(slots: SlotMap) -> None:
            ctx.shards = slots

        control = resharding_for(settings, store, run_mover=True, on_map=route_by)
        assert control is not None
        return control

    return create_app(
        settings,
        store=store,
        crons=PgCronStore(store),
        view_factory=(lambda: ZkClusterView(zk)) if zk else None,
        resharding=resharding if zk else None,
    )


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run a process's main coroutine on uvloop (a runtime dependency, as
    for the API): a worker's event loop (a task, a callback and a socket
    wait per job) costs a third less than on asyncio's own loop (50,000
    tasks created and run: 4.6 against 6.7 us each)."""
    try:
        import uvloop
    except ImportError:  # a platform without it (Windows): asyncio's own loop
        asyncio.run(main)
        return
    uvloop.run(main)


def run_api(settings: Settings) -> None:
    import uvicorn

    from cluster.api.server import VakitHttpProtocol

    app = api_app(settings)
    tune_gc()
    uvicorn.run(
        app,
        host=settings.api_host,
        port=settings.api_port,
        # httptools and uvloop (runtime dependencies): h11 and asyncio's own
        # loop cost a third more CPU per request. The protocol is uvicorn's
        # httptools one, writing a response's head and body together and
        # answering the create routes without the ASGI cycle.
        http=VakitHttpProtocol,
        loop="auto",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
    )
