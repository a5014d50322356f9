"""Fixtures of the fault tests: real processes, a stallable target, and
PostgreSQL servers a test may stop (the session-wide ones must stay up).

When a test fails, the tail of every process log it started is attached to
the report.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from cluster.local.pgserver import PgServer
from tests.pgfixtures import migrated_servers, start_pg
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
    with migrated_servers("vakit-fault-pg-", lambda base, i: start_pg(base, f"shard{i}")) as servers:
        yield servers


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
