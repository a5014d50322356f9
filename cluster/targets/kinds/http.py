"""The HTTP kind: ``{"kind": "HTTP", "url", "headers"?}``, POSTed by
:class:`cluster.targets.http.HttpTarget`; always offered."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from cluster.targets.registry import CliOption, Spec, TargetCheck, TargetEnv, TargetKind

if TYPE_CHECKING:
    from cluster.targets import Target
    from cluster.targets.document import TargetDocument

__all__ = ["KIND"]


def _build(env: TargetEnv) -> Target:
    # aiohttp is a second to import: the API and the CLI never need it.
    from cluster.targets.http import HttpTarget

    return HttpTarget(env.policy, env.settings.http_pool_size, scope=env.scope, signer=env.signer)


@cache
def _document() -> type[TargetDocument]:
    # pydantic is imported here, not with the kind: the CLI reads the kinds.
    import re

    from pydantic import Field, field_validator

    from cluster.targets.document import TargetDocument

    class HttpTargetIn(TargetDocument):
        kind: Literal["HTTP"]
        url: str = Field(
            min_length=1,
            max_length=2048,
            description="An absolute http(s) URL, ASCII, its host among those granted to the "
            "owner; addresses that are not public are refused unless the operator allows them.",
        )
        headers: dict[str, str] | None = Field(
            None,
            description="Extra request headers. Credentials, hop-by-hop and forwarding headers "
            "(the operator's deny list), Vakit-* and Webhook-* are refused.",
        )

        @field_validator("headers")
        @classmethod
        def _headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
            if value is None:
                return value
            if len(value) > 20:
                raise ValueError("at most 20 extra headers")
            for name, val in value.items():
                if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", name):
                    raise ValueError(f"invalid header name {name!r}")
                if len(val) > 1024 or "\r" in val or "\n" in val:
                    raise ValueError(f"invalid value for header {name!r}")
            # Which names may be set is the operator's and Vakit's choice
            # (cluster.targets.scope), checked with the owner's grants.
            return value

    return HttpTargetIn


def _checker(env: TargetEnv) -> TargetCheck:
    scope, policy = env.scope, env.policy
    # The check is a pure function of the owner and the URL, and a batch
    # (or a client's stream of creates) sends the same few URLs again and
    # again: remember the accepted ones, within a bound.
    allowed: set[tuple[str, str]] = set()

    def check(spec: Spec, owner: str) -> None:
        scope.check_headers(spec.get("headers"))
        url = spec["url"]
        key = (owner, url)
        if key in allowed:
            return
        scope.check_http(owner, policy.parse(url))
        if len(allowed) >= 10_000:
            allowed.clear()
        allowed.add(key)

    return check


def _address(spec: Spec) -> str:
    return str(spec.get("url", ""))


def _limit_key(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


KIND = TargetKind(
    name="HTTP",
    build=_build,
    document=_document,
    checker=_checker,
    address=_address,
    limit_key=_limit_key,
    cli_option=CliOption("--url", "url", "HTTP target URL."),
)
