"""The operator's contract: reads over a shard's jobs for the console, the
API's search, quotas and readiness (STYLE.md item 17)."""

from __future__ import annotations

from typing import Protocol

from cluster.model import (
    JobRecord,
    JobSearchParams,
    LatenessMinute,
    LatenessParams,
    OwnerCountsParams,
)
from cluster.store.contracts.readings import Backlog, WorkersSeen

__all__ = ["JobInsight"]


class JobInsight(WorkersSeen, Backlog, Protocol):
    """Reads only: nothing here changes a job."""

    # The schema version this code expects; a shard below it is not ready.
    latest_schema_version: int

    async def schema_version(self, shard: int) -> int:
        """The schema version the shard has (0: never migrated)."""
        ...

    async def search_jobs(self, shard: int, params: JobSearchParams) -> list[JobRecord]:
        """A page of the owner's jobs on this shard (near, far and history),
        newest first by id, below ``params.before``, filtered; with their
        attempt logs when ``params.with_attempts``."""
        ...

    async def start_lateness(self, shard: int, params: LatenessParams) -> list[LatenessMinute]:
        """Start lateness of the attempts logged on this shard that ended in
        the last ``params.minutes`` minutes, one entry per UTC minute that
        has any, oldest first (the operator's lateness chart)."""
        ...

    async def pending_by_owner(self, shard: int, params: OwnerCountsParams) -> dict[str, int]:
        """Jobs not yet finished (scheduled, far or running) per owner, cron
        occurrences included: the ``params.limit`` owners with the most."""
        ...
