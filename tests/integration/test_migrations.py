"""The numbered migrations produce the schema the queries expect."""

from __future__ import annotations

import re

import psycopg
import pytest

from cluster.local.pgserver import PgServer
from cluster.store.migrate import LATEST_VERSION, migrate_shard, schema_version
from cluster.store.sql import QUERIES, load_migrations

pytestmark = pytest.mark.integration


def columns(conn: psycopg.Connection, table: str) -> list[tuple[str, str]]:
    return [
        (r[0], r[1])
        for r in conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = %s ORDER BY ordinal_position",
            (table,),
        )
    ]


def test_fresh_database_migrates_to_latest_and_is_idempotent(pg_servers: list[PgServer]) -> None:
    dsn = pg_servers[0].create_database("mig_fresh")
    assert migrate_shard(dsn) == [m.version for m in load_migrations()]
    assert migrate_shard(dsn) == []  # a second run applies nothing
    with psycopg.connect(dsn) as conn:
        assert schema_version(conn) == LATEST_VERSION
        # The mover copies rows with SELECT *: both tables must line up.
        assert columns(conn, "jobs") == columns(conn, "jobs_far")
        # History keeps every column of a job plus finished_at.
        hot = {c for c, _ in columns(conn, "jobs")} - {"locked_by", "claimed_at", "lease_until"}
        history = {c for c, _ in columns(conn, "job_history")}
        # A finished job is not paused: the pause lives only while it waits.
        missing = hot - history - {"concurrency", "deadline_at", "paused_at", "pause_reason"}
        assert not missing, f"job_history lacks {missing}"


_SCHEMA_ERRORS = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedColumn,
    psycopg.errors.SyntaxError,
    psycopg.errors.UndefinedObject,
)


def test_every_named_query_prepares_against_the_schema(pg_servers: list[PgServer]) -> None:
    dsn = pg_servers[1].create_database("mig_queries")
    migrate_shard(dsn)
    with psycopg.connect(dsn) as conn:
        for name, text in QUERIES.items():
            if text.lstrip().upper().startswith("CREATE"):
                continue  # DDL cannot be prepared; the migration test runs it
            # PREPARE parses and plans without running: a typo or a missing
            # column fails here, not in production.
            # Text (%(x)s) and binary (%(x)b) placeholders alike.
            placeholders = sorted(set(re.findall(r"%\((\w+)\)[sb]", text)))
            sql = text
            for i, p in enumerate(placeholders, start=1):
                sql = sql.replace(f"%({p})s", f"${i}").replace(f"%({p})b", f"${i}")
            sql = sql.replace("%%", "%")
            try:
                conn.execute(f"PREPARE q_{name} AS {sql}".encode())
                conn.execute(f"DEALLOCATE q_{name}".encode())
            except _SCHEMA_ERRORS as exc:
                raise AssertionError(f"query {name!r} does not match the schema: {exc}") from exc
            except psycopg.Error:
                # Untyped placeholders can be ambiguous to PREPARE alone;
                # psycopg sends typed values at run time.
                conn.rollback()
