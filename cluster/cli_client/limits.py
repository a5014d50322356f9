"""``vakit limits``: read and change, at run time, the limits that hold for
the whole cluster (operator token; issue 44, docs/design/limits.md).

``vakit limits list`` shows each limited key, where its limit comes
from and what the cluster applies; ``set KEY SPEC`` sets a key's limit
(SPEC as VAKIT_TARGET_LIMITS spells it: ``concurrency[/rate[/burst]]``, or
``none`` to lift a configured one); ``unset KEY`` goes back to the
configuration. Workers apply a change within seconds, without a restart.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from cluster.cli_client.api_command import Call, api_command
from cluster.model import parse_limit

__all__ = ["limits"]

COLUMNS = ("key", "concurrency", "rate", "burst", "source", "effectiveConcurrency", "consistent")


@click.group()
def limits() -> None:
    """Limits per target key, for the whole cluster (operator token)."""


def _show(call: Call, answer: dict[str, Any]) -> None:
    if call.fmt == "table" and answer.get("unreadableShards"):
        click.echo(f"shards not read: {answer['unreadableShards']}", err=True)
    call.emit(answer, COLUMNS, answer["limits"])


@api_command(limits, "list")
def limits_list(call: Call) -> None:
    """The limits in force: configured (VAKIT_TARGET_LIMITS) and set at run time."""
    _show(call, call.api.request("GET", "/api/v1/limits"))


@api_command(limits, "set")
@click.argument("key")
@click.argument("spec")
def limits_set(call: Call, key: str, spec: str) -> None:
    """Set KEY's limit to SPEC: concurrency[/rate[/burst]] (e.g. 20/200, /50/5), or none."""
    if spec.strip().lower() == "none":
        body: dict[str, Any] = {}
    else:
        try:
            limit = parse_limit(key, spec)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="SPEC") from exc
        body = {"concurrency": limit.concurrency, "rate": limit.rate, "burst": limit.burst}
    _show(call, call.api.request("PUT", f"/api/v1/limits/{quote(key, safe='')}", body=body))


@api_command(limits, "unset")
@click.argument("key")
def limits_unset(call: Call, key: str) -> None:
    """Drop KEY's run-time limit: the configured one, if any, applies again."""
    _show(call, call.api.request("DELETE", f"/api/v1/limits/{quote(key, safe='')}"))
