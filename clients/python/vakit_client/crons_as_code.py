"""Crons kept as code: the changes that make the server's cron jobs match a
list of definitions, found by name (``apply_crons`` on either client).

A field a definition leaves out is put back to its default, as ``vakit
crons apply`` does, so that deleting a line from the code undoes it; the
defaults are the API's (tests/unit/test_python_sdk.py holds them to the
server's). A target is compared on the keys the definition gives (the
server fills in others, such as the method).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vakit_client.calls import api_fields
from vakit_client.models import Cron, CronChange, parse_instant

__all__ = ["CRON_DEFAULTS", "plan_changes"]

# What the API stores for a field a create leaves out (``type`` is left out
# on purpose: the server derives it from the name).
CRON_DEFAULTS: dict[str, Any] = {
    "payload": None,
    "misfirePolicy": "RUN_ONCE",
    "concurrency": "ALLOW",
    "jitterSeconds": 0,
    "maxAttempts": 3,
    "timeoutSeconds": 60,
    "startingDeadlineSeconds": None,
    "enabled": True,
    "monthEndPolicy": "SKIP",
    "dstPolicy": "CRONIE",
    "startAt": None,
    "endAt": None,
    "maxRuns": None,
}
_INSTANTS = ("startAt", "endAt")


def _same(key: str, have: Any, want: Any) -> bool:
    if key in _INSTANTS:
        return (parse_instant(have) if have else None) == (parse_instant(want) if want else None)
    if key == "target" and isinstance(have, Mapping) and isinstance(want, Mapping):
        return all(have.get(k) == v for k, v in want.items())
    return bool(have == want)


def plan_changes(
    definitions: Sequence[Mapping[str, Any]],
    server: Sequence[Cron],
    owns: str | None,
    prune: bool,
) -> list[CronChange]:
    """The steps, in order: creates and updates in the definitions' order,
    then (with ``prune``) deletes of the crons named with the ``owns`` prefix
    that the definitions no longer list."""
    if prune and owns is None:
        raise ValueError("prune needs owns, the name prefix these definitions own")
    by_name = {c.name: c for c in server}
    changes: list[CronChange] = []
    seen: set[str] = set()
    for definition in definitions:
        want = api_fields(definition)
        name = want.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"a cron definition needs a name: {definition!r}")
        if name in seen:
            raise ValueError(f"cron {name!r} is defined twice")
        seen.add(name)
        if owns is not None and not name.startswith(owns):
            raise ValueError(f"cron {name!r} does not start with {owns!r}, the prefix owned")
        have = by_name.get(name)
        if have is None:
            changes.append(CronChange("create", name, fields=want))
            continue
        wanted = {**CRON_DEFAULTS, **want}
        wanted.pop("name")
        diff = {k: v for k, v in wanted.items() if not _same(k, have.raw.get(k), v)}
        action = "update" if diff else "unchanged"
        changes.append(CronChange(action, name, have.id, diff))
    if prune:
        changes += [
            CronChange("delete", c.name, c.id)
            for c in server
            if owns is not None and c.name.startswith(owns) and c.name not in seen
        ]
    return changes
