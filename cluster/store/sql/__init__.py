"""Named SQL: every statement of the PostgreSQL store, and the migrations.

``queries.sql`` holds ``-- name: <name>`` blocks; :data:`QUERIES` maps each
name to its text, loaded once. Migrations are ``migrations/NNNN_name.sql``,
applied in order by :mod:`cluster.store.migrate`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

__all__ = ["QUERIES", "Migration", "load_migrations", "load_queries"]

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load_queries(text: str) -> dict[str, str]:
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        # Drop the leading comment lines: they document, psycopg needn't parse them.
        lines = [ln for ln in body.strip().splitlines() if not ln.startswith("--")]
        queries[name] = "\n".join(lines).strip().rstrip(";")
    return queries


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    folder = resources.files(__package__).joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, got {versions}")
    return found


QUERIES: dict[str, str] = load_queries(resources.files(__package__).joinpath("queries.sql").read_text())
