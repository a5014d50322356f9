"""PostgreSQL for the tests: real servers, started by the fixtures.

Two servers (two shards) live for the whole session; each test gets fresh
databases cloned from a migrated template, so tests never see each other's
rows. The servers run with a non-UTC time zone (Asia/Kolkata, +05:30) to catch
naive-time bugs. When a Docker engine answers, the session servers are
PostgreSQL 15 containers (testcontainers); otherwise local binaries, run as
the ``postgres`` user. Fault tests that stop and start a server always use
local binaries (``pg_ctl``), which ``make`` installs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import psycopg.sql
import pytest

from cluster.local.pgserver import PgServer
from cluster.store.migrate import migrate_shard
from cluster.store.postgres import PgStore

TEMPLATE = "vakit_template"
SHARDS = 2


def make_base_dir(prefix: str) -> Path:
    # PostgreSQL runs as 'postgres' and must traverse the directory.
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("VAKIT_TEST_TMP")))
    base.chmod(0o755)
    return base


def start_pg(
    base: Path, name: str, *, synchronous_commit: bool = False, **kwargs: object
) -> PgServer:
    """A test server in ``base/name``: fsync off (a machine crash is not what
    the tests inject). ``synchronous_commit`` keeps commits synchronous, for
    the tests that crash the server or fill its disk: with it off, a server
    that stops loses commits it had acknowledged."""
    settings = {"timezone": "'Asia/Kolkata'"}
    if synchronous_commit:
        settings["synchronous_commit"] = "on"
    server = PgServer(
        base / name,
        durable=False,
        extra_settings=settings,
        **kwargs,  # type: ignore[arg-type]
    )
    server.start()
    return server


@contextmanager
def migrated_servers(
    prefix: str, start: Callable[[Path, int], PgServer]
) -> Iterator[list[PgServer]]:
    """SHARDS servers of one test alone, each started by ``start(base,
    shard)`` (``base`` a fresh directory), with a migrated database "vakit";
    stopped at once and removed afterwards, however the test ended."""
    base = make_base_dir(prefix)
    servers: list[PgServer] = []
    try:
        for i in range(SHARDS):
            servers.append(start(base, i))
        for i, server in enumerate(servers):
            server.create_database("vakit")
            migrate_shard(server.dsn_for("vakit"), i)
        yield servers
    finally:
        for server in servers:
            server.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


class ContainerPg:
    """A PostgreSQL container with the few PgServer methods the fixtures use.

    Only taken when a Docker engine answers; none does on the development
    machine, so this path has not run there.
    """

    def __init__(self) -> None:
        from testcontainers.community.postgres import PostgresContainer

        self._container = PostgresContainer(
            "postgres:15", username="postgres", password="postgres", dbname="postgres"
        ).with_command("postgres -c timezone=Asia/Kolkata -c max_connections=200 -c fsync=off")
        self._container.start()
        host = self._container.get_container_host_ip()
        port = self._container.get_exposed_port(5432)
        self._base = f"postgresql://postgres:postgres@{host}:{port}"

    @property
    def dsn(self) -> str:
        return self.dsn_for("postgres")

    def dsn_for(self, dbname: str) -> str:
        return f"{self._base}/{dbname}"

    def create_database(self, name: str, template: str | None = None) -> str:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            query = psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name))
            if template:
                query = psycopg.sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    psycopg.sql.Identifier(name), psycopg.sql.Identifier(template)
                )
            conn.execute(query)
        return self.dsn_for(name)

    def stop(self, mode: str = "fast") -> None:
        self._container.stop()


@pytest.fixture(scope="session")
def pg_servers() -> Iterator[list[PgServer]]:
    from tests.zkfixtures import docker_available

    if docker_available():
        containers = [ContainerPg() for _ in range(SHARDS)]
        try:
            for i, c in enumerate(containers):
                c.create_database(TEMPLATE)
                migrate_shard(c.dsn_for(TEMPLATE), i)
            yield containers  # type: ignore[misc]
        finally:
            for c in containers:
                c.stop()
        return
    base = make_base_dir("vakit-test-pg-")
    servers: list[PgServer] = []
    try:
        for i in range(SHARDS):
            server = start_pg(base, f"shard{i}")
            servers.append(server)
            server.create_database(TEMPLATE)
            migrate_shard(server.dsn_for(TEMPLATE), i)
        yield servers
    finally:
        for server in servers:
            server.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


def clone_databases(servers: list[PgServer]) -> list[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    return [s.create_database(name, template=TEMPLATE) for s in servers]


def drop_databases(dsns: list[str]) -> None:
    for dsn in dsns:
        admin = dsn.rsplit("/", 1)[0] + "/postgres"
        name = dsn.rsplit("/", 1)[1]
        try:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(
                    psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        psycopg.sql.Identifier(name)
                    )
                )
        except psycopg.OperationalError:
            pass  # the server was stopped by the test and is gone


@pytest.fixture
def shard_dsns(pg_servers: list[PgServer]) -> Iterator[list[str]]:
    dsns = clone_databases(pg_servers)
    yield dsns
    drop_databases(dsns)


@pytest.fixture
async def store(shard_dsns: list[str]) -> AsyncIterator[PgStore]:
    s = PgStore(shard_dsns, max_size=4, timeout=3.0)
    await s.open()
    yield s
    await s.close()
