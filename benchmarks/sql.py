"""The benchmarks' named SQL (``queries.sql``), loaded once.

Same format and loader as ``cluster/sql``: the harness never builds SQL from
strings; a table name goes in through :class:`psycopg.sql.Identifier`.
"""

from __future__ import annotations

from importlib import resources

from psycopg import sql

from cluster.store import load_queries

__all__ = ["QUERIES", "query"]

QUERIES: dict[str, str] = load_queries(
    resources.files(__package__).joinpath("queries.sql").read_text()
)


def query(name: str, table: str | None = None) -> sql.SQL | sql.Composed:
    """The named statement, with ``{table}`` bound to ``table`` when given."""
    # The text comes from our own file, never from input: as safe as a literal.
    text = sql.SQL(QUERIES[name])
    return text if table is None else text.format(table=sql.Identifier(table))
