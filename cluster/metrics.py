"""Every Prometheus metric Vakit exports, named in one place.

Names follow Prometheus conventions: base units (seconds, bytes), ``_total``
for counters. Labels are low-cardinality: shard, target kind, outcome, route,
reason. Never a job id.

Two labels name what tenants create, and are bounded by what the operator
declares (:func:`declare_labels`): ``target`` is the HTTP host or
``kafka:<topic>`` only for declared targets, and ``cron`` the cron job's id
only for declared crons; everything else is ``other``. By default nothing is
declared: no tenant's host, topic or cron id reaches a scrape, and the
number of series does not grow with what tenants do.
"""

from __future__ import annotations

import platform
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from cluster import __version__

__all__ = [
    "API_REQUESTS",
    "API_REQUEST_SECONDS",
    "BACKLOG",
    "BUILD_INFO",
    "CLAIMED",
    "COMPLETED",
    "CRON_CLOCK_SKEW_REFUSED",
    "CRON_LAST_SUCCESS",
    "CRON_MATERIALIZED",
    "CRON_MISSED",
    "CRON_SKIPPED",
    "DB_POOL",
    "EVENT_LOOP_LAG",
    "FAILED",
    "FENCED",
    "INFLIGHT",
    "LEADERSHIP_CHANGES",
    "LEADER_LISTENING",
    "LEADER_WAKEUPS",
    "LEASE_EXPIRED",
    "LIMIT_ADMITTED",
    "LIMIT_IN_FORCE",
    "LIMIT_SETTINGS_STALE",
    "LIMIT_SLOWED",
    "MAINTENANCE_LAST_SUCCESS",
    "MOVED",
    "OLDEST_DUE_AGE",
    "OTHER",
    "REBALANCES",
    "RESHARD_ROWS",
    "RESHARD_SLOTS",
    "RESHARD_STEP_SECONDS",
    "RETRIED",
    "SHARDS_LED",
    "SHARDS_OWNED",
    "SLOT_MAP_EPOCH",
    "START_LATENESS",
    "STORE_QUERY_SECONDS",
    "TARGET_CALL_SECONDS",
    "TARGET_FIRES",
    "TARGET_WAITING",
    "WORKER_CLOCK_OFFSET",
    "ZK_SESSION_STATE",
    "cron_label",
    "declare_labels",
    "target_label",
]

OTHER = "other"
_targets: frozenset[str] = frozenset()
_crons: frozenset[str] = frozenset()
_all_crons = False


def declare_labels(targets: Iterable[str] = (), crons: Iterable[str] = ()) -> None:
    """The targets (HTTP hosts, ``kafka:<topic>``) and cron ids (``cron_…``,
    or ``*`` for all) that get a series of their own; set once at start-up."""
    global _targets, _crons, _all_crons
    _targets = frozenset(t.lower() for t in targets)
    declared = frozenset(crons)
    _all_crons = "*" in declared
    _crons = declared - {"*"}


def target_label(key: str) -> str:
    """The ``target`` label of a target key (host or ``kafka:<topic>``)."""
    return key if key in _targets else OTHER


def cron_label(cron_id: str) -> str:
    """The ``cron`` label of a cron id (``cron_…``)."""
    return cron_id if _all_crons or cron_id in _crons else OTHER


def observe_many(child: Any, values: Iterable[float]) -> None:
    """``child.observe(v)`` for each of ``values`` (a histogram's labelled
    child), with one locked add per bucket instead of a lock and a scan of
    the buckets per value.

    A worker observes the lateness and the call duration of every firing: in
    a 100,000-job wave, observe() one value at a time was a fifth of the
    worker's CPU while it started the wave. This reaches into the child's
    buckets (prometheus-client's ``_upper_bounds``, ``_buckets``, ``_sum``,
    pinned by the lock file); ``test_metrics_bulk`` holds the exposition to
    the one observe() gives."""
    bounds = child._upper_bounds
    counts = [0] * len(bounds)
    total = 0.0
    for value in values:
        counts[bisect_left(bounds, value)] += 1  # the first bucket with value <= le
        total += value
    child._sum.inc(total)
    for i, n in enumerate(counts):
        if n:
            child._buckets[i].inc(n)


BUILD_INFO = Gauge(
    "vakit_build_info",
    "Always 1; the labels say which Vakit version and Python this process runs.",
    ["version", "python"],
)
BUILD_INFO.labels(__version__, platform.python_version()).set(1)

# Start lateness is the scheduler's main SLI: start - run_at. Buckets reach
# down to milliseconds (preloaded waves) and up to minutes (an outage), and
# are dense where a large round-hour wave's tail lands (1 s to 60 s: at most
# a third apart), so the p99 of a 1M-job wave (tens of seconds) is read to
# within a few seconds instead of "between 10 and 30".
_LATENESS_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 5, 7.5,
    10, 15, 20, 25, 30, 35, 40, 45, 50, 60, 90, 120, 300, 900,
)  # fmt: skip
START_LATENESS = Histogram(
    "vakit_job_start_lateness_seconds",
    "Seconds between a job's run_at and the moment its target was fired.",
    ["shard", "target_kind"],
    buckets=_LATENESS_BUCKETS,
)
TARGET_CALL_SECONDS = Histogram(
    "vakit_target_call_duration_seconds",
    "Seconds one firing's call to its target took (HTTP request and response, Kafka "
    "delivery), by target kind and result (ok, retry, rejected).",
    ["target_kind", "result"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
EVENT_LOOP_LAG = Histogram(
    "vakit_event_loop_lag_seconds",
    "How late this process's event loop ran a timer (sampled twice a second): time "
    "spent in callbacks that never yield shows here before it shows as job lateness.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CLAIMED = Counter("vakit_jobs_claimed_total", "Jobs claimed by this worker.", ["shard"])
COMPLETED = Counter(
    "vakit_jobs_succeeded_total", "Jobs that ended SUCCEEDED.", ["shard", "target_kind"]
)
RETRIED = Counter(
    "vakit_jobs_retried_total",
    "Failed attempts rescheduled with backoff.",
    ["shard", "target_kind"],
)
FAILED = Counter(
    "vakit_jobs_failed_total",
    "Jobs that ended FAILED (the dead letter): attempts exhausted or a permanent error. "
    "owner is the job's owner service when it is one of the configured tenants "
    "(api_tokens), 'other' otherwise: a bounded label that routes the alert to the team.",
    ["shard", "target_kind", "owner"],
)
FENCED = Counter(
    "vakit_fenced_writes_total",
    "Heartbeat, completion or release writes that matched no row: this worker had lost the job.",
    ["shard", "operation"],
)
LEASE_EXPIRED = Counter(
    "vakit_lease_expiries_total",
    "RUNNING jobs whose lease ran out and that the reaper took back.",
    ["shard"],
)
INFLIGHT = Gauge("vakit_worker_inflight_jobs", "Jobs claimed and not yet finished.", ["shard"])
BACKLOG = Gauge(
    "vakit_due_unclaimed_jobs", "Jobs due now and not yet claimed (the backlog).", ["shard"]
)
OLDEST_DUE_AGE = Gauge(
    "vakit_oldest_due_age_seconds", "Age of the oldest due and unclaimed job.", ["shard"]
)
TARGET_WAITING = Gauge(
    "vakit_target_waiting_jobs",
    "Jobs due and held back (SCHEDULED, unclaimed) by a target's limit, on the shards "
    "this worker polls (re-counted every few seconds).",
    ["target"],
)
LIMIT_ADMITTED = Counter(
    "vakit_limit_admitted_total", "Jobs a limited claim admitted, by limit key.", ["target"]
)
LIMIT_SLOWED = Counter(
    "vakit_limit_slowed_total",
    "Times a target's 429/503 with Retry-After paused its limited key for the cluster.",
    ["target"],
)
LIMIT_IN_FORCE = Gauge(
    "vakit_limit_in_force",
    "The cluster-wide limit in force on a key, as this worker applies it: kind is "
    "concurrency (firings in flight) or rate (firings per second).",
    ["target", "kind"],
)
LIMIT_SETTINGS_STALE = Gauge(
    "vakit_limit_settings_stale",
    "1 while this worker cannot read a shard's run-time limits and applies the last "
    "ones it read (or the configured ones): the limiter's fallback state.",
    ["shard"],
)
TARGET_FIRES = Counter(
    "vakit_target_fires_total",
    "Firings by target (HTTP host or kafka:<topic>) and result: ok, retry (a retryable "
    "error: 408, 429, 5xx, timeout, connection) or rejected (a permanent error).",
    ["target", "result"],
)
MOVED = Counter(
    "vakit_far_jobs_moved_total", "Jobs moved from the far table to the hot table.", ["shard"]
)

API_REQUESTS = Counter(
    "vakit_api_requests_total", "API requests by route and status.", ["method", "route", "status"]
)
API_REQUEST_SECONDS = Histogram(
    "vakit_api_request_duration_seconds", "API request duration.", ["method", "route"]
)

ZK_SESSION_STATE = Gauge(
    "vakit_zk_session_state",
    "1 for the ZooKeeper session state this process is in (CONNECTED, SUSPENDED, LOST), 0 for the others.",
    ["state"],
)
SHARDS_OWNED = Gauge("vakit_shards_owned", "Shards this worker polls.")
SHARDS_LED = Gauge("vakit_shards_led", "Shards whose leader-only loops this worker runs.")
SLOT_MAP_EPOCH = Gauge(
    "vakit_slot_map_epoch",
    "Epoch of the slot map this process routes by (0: slot % shard count, never resharded).",
)
RESHARD_ROWS = Counter("vakit_reshard_rows_copied_total", "Rows the mover copied between shards.")
RESHARD_SLOTS = Counter("vakit_reshard_slots_moved_total", "Slots the mover moved between shards.")
RESHARD_STEP_SECONDS = Histogram(
    "vakit_reshard_step_seconds",
    "Time the mover spent in each step of a batch (plan, fence, copy, flip, clean), "
    "its ZooKeeper record write included.",
    ["step"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
REBALANCES = Counter(
    "vakit_rebalances_total", "Shard ownership recomputations after membership changed."
)
LEADERSHIP_CHANGES = Counter(
    "vakit_leadership_changes_total", "Leadership gained or lost, per shard.", ["shard", "change"]
)

CRON_MATERIALIZED = Counter(
    "vakit_cron_occurrences_created_total", "Cron occurrences written to the jobs table.", ["shard"]
)
CRON_MISSED = Counter(
    "vakit_cron_missed_total",
    "Cron slots not run, by reason (misfire cap, SKIP policy, starting deadline).",
    ["cron", "reason"],
)
CRON_CLOCK_SKEW_REFUSED = Counter(
    "vakit_cron_clock_skew_refusals_total",
    "Materializer passes not run because this process's clock and the shard's "
    "now() disagreed by more than the bound (a clock jump would misfire slots).",
    ["shard"],
)
WORKER_CLOCK_OFFSET = Gauge(
    "vakit_worker_clock_offset_seconds",
    "The shards' now() minus this host's wall clock, as the worker last measured "
    "it; the worker fires by the shards' time, so a large value is a host clock "
    "to fix, not late jobs.",
)
CRON_SKIPPED = Counter(
    "vakit_cron_skipped_total",
    "Cron occurrences skipped by concurrency policy (FORBID).",
    ["cron"],
)
STORE_QUERY_SECONDS = Histogram(
    "vakit_store_query_seconds",
    "Seconds one named statement took on a shard, waiting for a pooled connection included.",
    ["shard", "query"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
DB_POOL = Gauge(
    "vakit_db_pool_connections",
    "This process's connections to a shard: size (open), idle, and waiting "
    "(requests queued for a connection), when scraped.",
    ["shard", "state"],
)
MAINTENANCE_LAST_SUCCESS = Gauge(
    "vakit_maintenance_last_success_timestamp_seconds",
    "Unix time a leader-only loop (reaper, mover, janitor, backlog, materializer) "
    "last finished a pass on a shard without error.",
    ["loop", "shard"],
)
LEADER_WAKEUPS = Counter(
    "vakit_leader_wakeups_total",
    "Wake-ups a leader loop heard from a shard (the materializer: a cron written "
    "due within a minute); each brings a pass forward.",
    ["loop", "shard"],
)
LEADER_LISTENING = Gauge(
    "vakit_leader_listening",
    "1 while a leader loop listens for wake-ups on a shard it runs, 0 while its "
    "listener is down (the loop keeps its interval meanwhile).",
    ["loop", "shard"],
)
CRON_LAST_SUCCESS = Gauge(
    "vakit_cron_last_success_timestamp_seconds",
    "Unix time of the last successful occurrence of an enabled cron job "
    "(its creation time until the first success).",
    ["cron"],
)
