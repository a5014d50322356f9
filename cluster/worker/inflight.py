"""What a worker holds for each job it claimed, from the claim to the outcome.

An :class:`InFlight` entry is made once per claimed job and shared by the
claim loop, the timing wheel, the firing task, the heartbeat and the
completer, which all live in their own modules.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cluster.errors import SlotMoving
from cluster.model import ClaimedJob

__all__ = ["InFlight", "log_fields", "refused_for_move"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class InFlight:
    job: ClaimedJob
    shard: int
    lease_until: datetime
    job_id: str  # the public id, encoded once when claimed (not at the instant)
    task: asyncio.Task[None] | None = None
    fired: bool = False  # the target was (or is being) called
    lost: bool = False  # a heartbeat found the lease gone
    # Claimed ahead of a wave by the preloader: counted against the preload
    # budget, not against max_inflight, until the wheel releases it.
    preloaded: bool = False
    # A limited key's job starts no earlier than its place in the key's
    # rate (POSIX seconds; 0: no such place, cluster/worker/admission.py).
    not_before: float = 0.0
    # The job's run_at in POSIX seconds (Clock.timestamp()'s scale), made
    # when claimed: a start's lateness is then one subtraction of floats.
    due: float = field(init=False)

    def __post_init__(self) -> None:
        self.due = self.job.run_at.timestamp()

    @property
    def id(self) -> uuid.UUID:
        return self.job.id


def log_fields(entry: InFlight) -> dict[str, Any]:
    """The structured log fields of a job's log lines."""
    return {"job_id": entry.job_id, "shard": entry.shard, "attempt": entry.job.attempt}


def refused_for_move(
    exc: SlotMoving, write: str, shard: int
) -> tuple[set[uuid.UUID], frozenset[uuid.UUID]]:
    """The ids a batch ``write`` (heartbeat, completion) wrote and those the
    shard refused because their slot is moving off it (issue 42), logged.
    A refused job is not lost: its row moves with its attempt and lease."""
    log.warning(
        "%s refused for %d jobs: slot moving off this shard",
        write,
        len(exc.refused),
        extra={"shard": shard, "slot": exc.slot},
    )
    return set(exc.written), exc.refused
