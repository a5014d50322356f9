"""What every handler shares, and the dependencies that hand it over.

:class:`ApiContext` holds the settings, the store and cron store contracts,
the clock, the shard map and the target policy; it lives on
``app.state.ctx``. Handlers receive it and the caller's owner through
``Depends`` (the :data:`Ctx` and :data:`Owner` annotations), so a new
endpoint is a function that names what it needs.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Header, Request

import shardmap
from cluster.clock import Clock
from cluster.config import Settings
from cluster.coordination.base import ClusterView
from cluster.errors import InvalidRequest, PayloadTooLarge, Unauthorized
from cluster.store.base import CronStore, Store
from cluster.targets.policy import AddressPolicy, TargetRefused

__all__ = ["ApiContext", "Ctx", "Owner", "get_context", "get_owner"]


class ApiContext:
    """Settings, storage, time and policy: what the handlers share."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        crons: CronStore,
        clock: Clock,
        *,
        view_factory: Callable[[], ClusterView] | None = None,
        latest_schema_version: int | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.crons = crons
        self.clock = clock
        self.shards = shardmap.ShardMap(store.shard_count)
        self.policy = AddressPolicy.from_list(
            settings.http_target_allow, allow_private=settings.allow_private_targets
        )
        self.tokens = dict(settings.api_tokens)
        self._allowed_urls: set[str] = set()
        # Builds the ZooKeeper view of the cluster; None without ZooKeeper.
        self.view_factory = view_factory
        self.view: ClusterView | None = None  # set once the view has connected
        self.latest_schema_version = (
            latest_schema_version
            if latest_schema_version is not None
            else store.latest_schema_version
        )

    def owner_for(self, authorization: str | None) -> str:
        if not authorization:
            raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("Authorization must be 'Bearer <token>'")
        given = token.strip().encode()
        owner = None
        for known, svc in self.tokens.items():
            # Constant-time compare; a lookup would leak token prefixes by timing.
            if hmac.compare_digest(known.encode(), given):
                owner = svc
        if owner is None:
            raise Unauthorized("unknown token")
        return owner

    def check_target(self, target: dict[str, Any]) -> None:
        """Targets this deployment refuses are a 422 at create time, not a
        failure at firing time."""
        kind = target["kind"]
        if kind == "HTTP":
            url = target["url"]
            if url in self._allowed_urls:
                return
            try:
                self.policy.check_url(url)
            except TargetRefused as exc:
                raise InvalidRequest(str(exc), field="target.url") from exc
            # The check is a pure function of the URL, and a batch (or a
            # client's stream of creates) sends the same few URLs again and
            # again: remember the accepted ones, within a bound.
            if len(self._allowed_urls) >= 10_000:
                self._allowed_urls.clear()
            self._allowed_urls.add(url)
        elif kind == "NOOP" and not self.settings.enable_noop_target:
            raise InvalidRequest(
                "the NOOP target is for benchmarks and is disabled (VAKIT_ENABLE_NOOP_TARGET)",
                field="target.kind",
            )
        elif kind == "KAFKA" and not self.settings.kafka_bootstrap:
            raise InvalidRequest(
                "no Kafka cluster is configured for this Vakit (VAKIT_KAFKA_BOOTSTRAP)",
                field="target.kind",
            )

    def check_payload(self, payload: Any) -> None:
        limit = self.settings.max_payload_bytes
        size = len(json.dumps(payload, separators=(",", ":")))
        if size > limit:
            raise PayloadTooLarge(
                f"payload is {size} bytes; the limit is {limit}", size=size, limit=limit, field="payload"
            )


# Both dependencies are coroutines: FastAPI runs a plain function in a thread
# pool, a hand-off that cost more than the rest of the dependency.
async def get_context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


async def get_owner(
    request: Request, authorization: str | None = Header(None)
) -> str:
    """The owner service the bearer token stands for; 401 otherwise."""
    ctx: ApiContext = request.app.state.ctx
    return ctx.owner_for(authorization)


Ctx = Annotated[ApiContext, Depends(get_context)]
Owner = Annotated[str, Depends(get_owner)]
