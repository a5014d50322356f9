"""The HTTP kind: ``{"kind": "HTTP", "url", "headers"?}``, POSTed by
:class:`cluster.targets.http.HttpTarget`; always offered."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from cluster.targets.registry import CliOption, Spec, TargetCheck, TargetEnv, TargetKind

if TYPE_CHECKING:
    from cluster.targets import Target

__all__ = ["KIND"]


def _build(env: TargetEnv) -> Target:
    # aiohttp is a second to import: the API and the CLI never need it.
    from cluster.targets.http import HttpTarget

    return HttpTarget(env.policy, env.settings.http_pool_size, scope=env.scope, signer=env.signer)


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
    checker=_checker,
    address=_address,
    limit_key=_limit_key,
    cli_option=CliOption("--url", "url", "HTTP target URL."),
)
