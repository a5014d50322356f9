"""The NOOP target: succeeds at once. For benchmarks; refused unless enabled."""

from __future__ import annotations

from cluster.model import ClaimedJob
from cluster.targets import FireResult

__all__ = ["NoopTarget"]


class NoopTarget:
    kind = "NOOP"
    enforces_timeout = True  # it never waits

    async def fire(self, job: ClaimedJob, job_id: str, timeout: float) -> FireResult:
        return FireResult.success()

    async def close(self) -> None:
        return None
