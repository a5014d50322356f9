"""Fixtures of the fault tests: real processes, a stallable target, and
PostgreSQL servers a test may stop (the session-wide ones must stay up).

When a test fails, the tail of every process log it started is attached to
the report.
"""

from __future__ import annotations

import shutil
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from cluster.local.pgserver import PgServer
from cluster.store.migrate import migrate_shard
from tests.pgfixtures import SHARDS, make_base_dir, start_pg
from tests.procs import FaultSink, ProcessHarness, running_processes


@pytest.fixture
def sink() -> Iterator[FaultSink]:
    with FaultSink() as s:
        yield s


@pytest.fixture
def procs(shard_dsns: list[str], tmp_path: Path) -> Iterator[ProcessHarness]:
    """Processes on the session's shards (fresh databases for this test)."""
    with running_processes(shard_dsns, tmp_path) as harness:
        yield harness


@pytest.fixture
def own_servers() -> Iterator[list[PgServer]]:
    """Two PostgreSQL servers of this test alone, migrated: it may stop them."""
    base = make_base_dir("vakit-fault-pg-")
    servers: list[PgServer] = []
    try:
        for i in range(SHARDS):
            server = start_pg(base, f"shard{i}")
            servers.append(server)
            server.create_database("vakit")
            migrate_shard(server.dsn_for("vakit"), i)
        yield servers
    finally:
        for server in servers:
            server.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def own_procs(own_servers: list[PgServer], tmp_path: Path) -> Iterator[ProcessHarness]:
    """Processes on :func:`own_servers`."""
    with running_processes([s.dsn_for("vakit") for s in own_servers], tmp_path) as harness:
        yield harness


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.failed:
        funcargs = getattr(item, "funcargs", {})
        for value in funcargs.values():
            if isinstance(value, ProcessHarness) and value.processes:
                report.sections.append(("vakit process logs", value.log_report()))
    return report
