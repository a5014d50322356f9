"""Shard DSNs: checked before any process connects, and masked for messages.

:mod:`cluster.config` splits ``VAKIT_SHARDS``; this module, which may import
psycopg, says whether each entry is a DSN libpq accepts.
"""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["mask_dsn", "shard_problems"]


def mask_dsn(dsn: str) -> str:
    """A DSN fit for a log line or an error message: no password."""
    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        return "<unparsable DSN>"
    if "password" in params:
        params["password"] = "***"
    return make_conninfo("", **params)


def shard_problems(shards: list[str]) -> list[str]:
    """What is wrong with a shard list, one line each with the fix (empty: nothing).

    Checked by every command that connects (not by the field validator, so
    tests may name in-memory shards freely)."""
    if not shards:
        return ["no shards configured: set VAKIT_SHARDS to the PostgreSQL DSNs in shard order"]
    problems: list[str] = []
    seen: dict[str, int] = {}
    for i, dsn in enumerate(shards):
        try:
            params = conninfo_to_dict(dsn)
        except Exception as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            problems.append(
                f"VAKIT_SHARDS entry {i} ({dsn[:60]!r}) is not a PostgreSQL DSN: {reason}; "
                "separate shards with commas or newlines (a DSN with several hosts goes in a JSON list)"
            )
            continue
        if not params:
            problems.append(f"VAKIT_SHARDS entry {i} is empty")
            continue
        key = "|".join(f"{k}={params[k]}" for k in sorted(params) if k != "password")
        if key in seen:
            problems.append(
                f"VAKIT_SHARDS entries {seen[key]} and {i} are the same database "
                f"({mask_dsn(dsn)}): each shard needs its own"
            )
        seen.setdefault(key, i)
    return problems
