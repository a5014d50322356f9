"""A cron's row on PostgreSQL: a definition as the single and the batch
statements take it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from cluster.model import (
    CronRecord,
)
from cluster.model.jsontext import json_bytes

__all__ = ["cron_columns", "cron_row"]

def cron_row(c: CronRecord) -> dict[str, Any]:
    return {
        "id": c.id,
        "owner": c.owner,
        "name": c.name,
        "schedule": c.schedule,
        "schedule_kind": c.schedule_kind,
        "time_zone": c.time_zone,
        "type": c.type,
        "target_kind": c.target_kind,
        "target": Jsonb(c.target, json_bytes),
        "payload": Jsonb(c.payload, json_bytes),
        "misfire_policy": c.misfire_policy,
        "concurrency": c.concurrency,
        "jitter_seconds": c.jitter_seconds,
        "max_attempts": c.max_attempts,
        "timeout_seconds": c.timeout_seconds,
        "starting_deadline_seconds": c.starting_deadline_seconds,
        "enabled": c.enabled,
        "anchor": c.anchor,
        "next_fire_at": c.next_fire_at,
        "fingerprint": c.fingerprint,
        "month_end_policy": c.month_end_policy,
        "dst_policy": c.dst_policy,
        "start_at": c.start_at,
        "end_at": c.end_at,
        "max_runs": c.max_runs,
    }


def cron_columns(crons: Sequence[CronRecord]) -> dict[str, Any]:
    """insert_crons' arrays, one per column; JSON as text, parsed by the cast."""
    return {
        "ids": [c.id for c in crons],
        "owners": [c.owner for c in crons],
        "names": [c.name for c in crons],
        "schedules": [c.schedule for c in crons],
        "schedule_kinds": [c.schedule_kind for c in crons],
        "time_zones": [c.time_zone for c in crons],
        "types": [c.type for c in crons],
        "target_kinds": [c.target_kind for c in crons],
        "targets": [json.dumps(c.target, separators=(",", ":")) for c in crons],
        "payloads": [json.dumps(c.payload, separators=(",", ":")) for c in crons],
        "misfire_policies": [c.misfire_policy for c in crons],
        "concurrencies": [c.concurrency for c in crons],
        "jitters": [c.jitter_seconds for c in crons],
        "max_attempts": [c.max_attempts for c in crons],
        "timeouts": [c.timeout_seconds for c in crons],
        "deadlines": [c.starting_deadline_seconds for c in crons],
        "enabled": [c.enabled for c in crons],
        "anchors": [c.anchor for c in crons],
        "next_fire": [c.next_fire_at for c in crons],
        "fingerprints": [c.fingerprint for c in crons],
        "month_ends": [c.month_end_policy for c in crons],
        "dsts": [c.dst_policy for c in crons],
        "start_ats": [c.start_at for c in crons],
        "end_ats": [c.end_at for c in crons],
        "max_runs": [c.max_runs for c in crons],
    }
