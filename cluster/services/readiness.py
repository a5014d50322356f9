"""Whether this Vakit can serve: every shard reachable, migrated to the
schema this code expects, and polled by at least one worker.

What ``/readyz`` answers; the rule lives here, the HTTP status and the
body's field names in the API (:mod:`cluster.api.ops`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.errors import VakitError
from cluster.model import WorkersSeenParams
from cluster.store.contracts.insight import JobInsight

__all__ = ["ShardReadiness", "shard_readiness"]


@dataclass(frozen=True, slots=True)
class ShardReadiness:
    """One shard's answer; ``schema_version`` is None and ``error`` says why
    when the shard could not be reached."""

    shard: int
    reachable: bool
    migrated: bool
    workers: int
    schema_version: int | None = None
    error: str | None = None

    @property
    def ready(self) -> bool:
        return self.reachable and self.migrated and self.workers > 0


async def shard_readiness(store: JobInsight, latest: int) -> list[ShardReadiness]:
    """Each shard in turn, against ``latest``, the newest schema version."""
    report = []
    for shard in range(store.shard_count):
        try:
            version = await store.schema_version(shard)
            workers = await store.workers_seen(shard, WorkersSeenParams())
        except VakitError as exc:
            report.append(ShardReadiness(shard, False, False, 0, error=exc.message))
            continue
        report.append(ShardReadiness(shard, True, version >= latest, len(workers), version))
    return report
