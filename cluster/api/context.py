"""What every handler shares, and the dependencies that hand it over.

:class:`ApiContext` holds the settings, the store and cron store contracts,
the clock, the shard map and the create-time checks (:mod:`cluster.services.checks`); it lives on
``app.state.ctx``. Handlers receive it and the caller's owner through
``Depends`` (the :data:`Ctx`, :data:`Owner` and :data:`Operator`
annotations), so a new endpoint is a function that names what it needs.

Tokens have one of two roles. A *tenant* token (``api_tokens``) stands for
one owner service and sees only its jobs and crons. An *operator* token
(``operator_tokens``) also reads the operator-only views (``/api/v1/cluster``,
``/metrics``) and may act for any owner with ``?owner=<service>``; without
it, it acts as its own name.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Query, Request
from fastapi.dependencies.models import Dependant

import shardmap
from cluster import logs
from cluster.clock import Clock
from cluster.config import Settings
from cluster.coordination.base import ClusterView
from cluster.errors import Forbidden, InvalidRequest, Unauthorized
from cluster.resharding.port import Resharding
from cluster.services.checks import CreateChecks
from cluster.services.quotas import OwnerLimits
from cluster.store.contracts.api import ApiJobStore
from cluster.store.contracts.cron_intake import CronIntake

__all__ = [
    "ApiContext",
    "Ctx",
    "Operator",
    "Owner",
    "Principal",
    "get_context",
    "get_operator",
    "get_owner",
    "known_query",
]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a token stands for: an owner service (tenant) or an operator."""

    name: str
    operator: bool = False


class ApiContext:
    """Settings, storage, time and policy: what the handlers share."""

    def __init__(
        self,
        settings: Settings,
        store: ApiJobStore,
        crons: CronIntake,
        clock: Clock,
        *,
        view_factory: Callable[[], ClusterView] | None = None,
        latest_schema_version: int | None = None,
        resharding: Resharding | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.crons = crons
        self.clock = clock
        # The slot map this process routes by (epoch 0: slot % N); replaced
        # whole when ZooKeeper shows a newer epoch (cluster.resharding.watch).
        self.shards = shardmap.SlotMap.modulo(store.shard_count)
        # The target and payload checks (a rule of the service layer); the
        # services call them as ctx.check_target and ctx.check_payload.
        self.checks = CreateChecks(settings)
        self.check_target = self.checks.check_target
        self.check_payload = self.checks.check_payload
        # By the SHA-256 of the token: finding a token is one hash and one
        # dict lookup whatever the number of tokens, and what a lookup's
        # timing could reveal is a prefix of a digest, not of a token.
        self._tokens: dict[bytes, tuple[bytes, Principal]] = {}
        for role_tokens, operator in (
            (settings.api_tokens, False),
            (settings.operator_tokens, True),
        ):
            for token, name in role_tokens.items():
                raw = token.encode()
                self._tokens[hashlib.sha256(raw).digest()] = (raw, Principal(name, operator))
        self._verified: dict[str, Principal] = {}
        # (owner, Idempotency-Key) of the keyed creates this process is serving.
        self.keys_in_flight: set[tuple[str, str]] = set()
        # Builds the ZooKeeper view of the cluster; None without ZooKeeper.
        self.view_factory = view_factory
        self.view: ClusterView | None = None  # set once the view has connected
        # The operator's shard calls (ZooKeeper); None without ZooKeeper.
        self.resharding = resharding
        self.limits = OwnerLimits(settings)
        self.metrics_port: int | None = None  # the port of api_metrics_port's server, once up
        self.latest_schema_version = (
            latest_schema_version
            if latest_schema_version is not None
            else store.latest_schema_version
        )

    def principal_for(self, authorization: str | None) -> Principal:
        """The tenant or operator a bearer token stands for; 401 otherwise."""
        # Headers already verified: a str dict's lookup hashes with a
        # per-process secret key, so its timing says nothing of a token.
        # Only known tokens are remembered, so strangers cannot fill it.
        if authorization:
            known = self._verified.get(authorization)
            if known is not None:
                return known
        who = self._verify(authorization)
        if authorization and len(self._verified) < 1024:
            self._verified[authorization] = who
        return who

    def _verify(self, authorization: str | None) -> Principal:
        if not authorization:
            raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("Authorization must be 'Bearer <token>'")
        given = token.strip().encode()
        entry = self._tokens.get(hashlib.sha256(given).digest())
        if entry is None or not hmac.compare_digest(entry[0], given):
            raise Unauthorized("unknown token")
        return entry[1]

    def owner_for(self, authorization: str | None, acting_for: str | None = None) -> str:
        """The owner a request acts for: a tenant's own; an operator's
        ``acting_for`` (the ``owner`` query parameter) or its own name."""
        who = self.principal_for(authorization)
        if acting_for is None or acting_for == who.name:
            logs.bind(owner=who.name)  # the request's later log lines; reset with its request id
            return who.name
        if not who.operator:
            raise Forbidden("only an operator token may act for another owner (?owner=)")
        if not 1 <= len(acting_for) <= 64:
            raise InvalidRequest("owner must be 1 to 64 characters", field="owner")
        logs.bind(owner=acting_for, operator=who.name)
        return acting_for

    def operator_for(self, authorization: str | None) -> Principal:
        """An operator token's principal; 401 without a token, 403 for a tenant's."""
        who = self.principal_for(authorization)
        if not who.operator:
            raise Forbidden("this view needs an operator token")
        return who


# Both dependencies are coroutines: FastAPI runs a plain function in a thread
# pool, a hand-off that cost more than the rest of the dependency.
async def get_context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


async def get_owner(
    request: Request,
    authorization: str | None = Header(None),
    owner: str | None = Query(
        None,
        min_length=1,
        max_length=64,
        description="Operator tokens only: act for this owner service (a tenant token "
        "may name only its own).",
    ),
) -> str:
    """The owner service the request acts for; 401 without a known token,
    403 for a tenant naming another owner."""
    ctx: ApiContext = request.app.state.ctx
    return ctx.owner_for(authorization, owner)


async def get_operator(request: Request, authorization: str | None = Header(None)) -> Principal:
    """The operator the bearer token stands for; 401 without one, 403 for a tenant."""
    ctx: ApiContext = request.app.state.ctx
    return ctx.operator_for(authorization)


def _query_names(dependant: Dependant) -> frozenset[str]:
    # ``owner`` is let through everywhere: the CLI's --owner adds it to an
    # operator's every call, and a route that acts for no owner ignores it.
    names = {"owner", *(param.alias for param in dependant.query_params)}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return frozenset(names)


# By route: the query parameters it declares (its own and its dependencies').
_QUERY_NAMES: dict[int, frozenset[str]] = {}


async def known_query(request: Request) -> None:
    """Unknown query parameters are refused (422), as unknown body fields
    are: a typo such as ``?stauts=FAILED`` must not answer every job, and
    the OpenAPI document lists each operation's parameters as all there are."""
    if not request.scope["query_string"] or not request.url.path.startswith("/api/"):
        return
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if not isinstance(dependant, Dependant):
        return
    names = _QUERY_NAMES.get(id(route))
    if names is None:
        names = _QUERY_NAMES[id(route)] = _query_names(dependant)
    unknown = sorted(set(request.query_params) - names)
    if unknown:
        raise InvalidRequest(f"unknown query parameter {unknown[0]!r}", field=unknown[0][:64])


Ctx = Annotated[ApiContext, Depends(get_context)]
Owner = Annotated[str, Depends(get_owner)]
Operator = Annotated[Principal, Depends(get_operator)]
