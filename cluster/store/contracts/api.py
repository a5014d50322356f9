"""The API's view of the job store: intake and insight, and the opening and
closing of the store it serves (a Protocol cannot say "both" otherwise)."""

from __future__ import annotations

from typing import Protocol

from cluster.store.contracts.insight import JobInsight
from cluster.store.contracts.intake import JobIntake
from cluster.store.contracts.limits import LimitSettings
from cluster.store.contracts.sharded import Lifecycle

__all__ = ["ApiJobStore"]


class ApiJobStore(JobIntake, JobInsight, LimitSettings, Lifecycle, Protocol):
    """What the API may do to jobs; the worker's claims and the leader's
    upkeep are not in it (import-linter holds the API to this)."""
