"""A target kind from outside the package: its module and its registration,
nothing else. Run as a program (``python -m tests.unit.echo_kind``) by
tests/unit/test_target_plugin.py: it registers ECHO before anything builds
the target documents, then prints what the API and the worker made of it.

Not a test module itself: importing it registers a kind in the process's
registry, which the other tests must not see.
"""

from __future__ import annotations

import asyncio
import json
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from cluster.targets import FireResult
from cluster.targets.kinds import KINDS
from cluster.targets.policy import TargetRefused
from cluster.targets.registry import Spec, TargetCheck, TargetEnv, TargetKind

if TYPE_CHECKING:
    from cluster.model import ClaimedJob
    from cluster.targets import Target
    from cluster.targets.document import TargetDocument

__all__ = ["KIND", "EchoTarget"]


class EchoTarget:
    """Succeeds at once; remembers what it fired."""

    kind = "ECHO"
    enforces_timeout = True

    def __init__(self) -> None:
        self.fired: list[str] = []

    async def fire(self, job: ClaimedJob, job_id: str, timeout: float) -> FireResult:
        self.fired.append(job_id)
        return FireResult.success()

    async def close(self) -> None:
        return None


def _build(env: TargetEnv) -> Target:
    return EchoTarget()


@cache
def _document() -> type[TargetDocument]:
    from pydantic import Field

    from cluster.targets.document import TargetDocument

    class EchoTargetIn(TargetDocument):
        kind: Literal["ECHO"]
        channel: str = Field(pattern=r"^[a-z0-9.-]{1,64}$")

    return EchoTargetIn


def _checker(env: TargetEnv) -> TargetCheck:
    def check(spec: Spec, owner: str) -> None:
        if not str(spec["channel"]).startswith(f"{owner}."):
            raise TargetRefused(f"channel must start with '{owner}.'", field="target.channel")

    return check


KIND = KINDS.register(
    TargetKind(
        name="ECHO",
        build=_build,
        document=_document,
        checker=_checker,
        address=lambda spec: str(spec.get("channel", "")),
    )
)


async def _through_the_api() -> dict[str, Any]:
    # Imported after the registration: they build the target union.
    import httpx

    from cluster.api.app import create_app
    from cluster.config import Settings
    from cluster.processes import build_targets
    from cluster.store.memory import MemStore
    from cluster.store.memory_cron import MemCronStore

    settings = Settings(shards=["mem-0", "mem-1"], api_tokens={"token-a": "svc-a"})
    store = MemStore(2)
    app = create_app(settings, store=store, crons=MemCronStore(store))
    auth = {"Authorization": "Bearer token-a"}

    def job(target: dict[str, Any]) -> dict[str, Any]:
        return {"type": "T", "runAt": "2030-01-01T00:00:00Z", "target": target, "payload": {}}

    answers: dict[str, Any] = {}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
            created = await api.post(
                "/api/v1/jobs", json=job({"kind": "ECHO", "channel": "svc-a.audit"}), headers=auth
            )
            stored = await api.get(f"/api/v1/jobs/{created.json()['jobId']}", headers=auth)
            nightly = {
                "name": "echo", "type": "T", "schedule": "0 2 * * *", "timeZone": "UTC",
                "target": {"kind": "ECHO", "channel": "svc-a.nightly"}, "payload": {},
            }  # fmt: skip
            cron = await api.post("/api/v1/cron-jobs", json=nightly, headers=auth)
            unknown_field = await api.post(
                "/api/v1/jobs", json=job({"kind": "ECHO", "channel": "svc-a.x", "url": "u"}),
                headers=auth,
            )  # fmt: skip
            refused = await api.post(
                "/api/v1/jobs", json=job({"kind": "ECHO", "channel": "svc-b.x"}), headers=auth
            )
            answers = {
                "created": created.status_code,
                "stored_target": stored.json()["target"],
                "cron": cron.status_code,
                "unknown_field": [unknown_field.status_code, unknown_field.json()],
                "refused": [refused.status_code, refused.json()],
                "openapi_union": [
                    ref["$ref"]
                    for ref in app.openapi()["components"]["schemas"]["CreateJobIn"]["properties"][
                        "target"
                    ]["oneOf"]
                ],
            }
    targets = build_targets(settings)
    answers["worker_targets"] = {name: type(t).__name__ for name, t in targets.items()}
    return answers


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_through_the_api())))
