"""A missing ZooKeeper or Kafka fails the tests that need it; only an explicit
``VAKIT_TEST_…=off`` skips them (tests/tiers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import kafkafixtures, zkfixtures
from tests.tiers import server_missing

REPO = Path(__file__).resolve().parents[2]


def test_a_missing_server_fails_unless_its_tier_is_turned_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VAKIT_TEST_ZOOKEEPER", raising=False)
    with pytest.raises(pytest.fail.Exception, match="VAKIT_TEST_ZOOKEEPER=off"):
        server_missing("VAKIT_TEST_ZOOKEEPER", "no ZooKeeper")
    monkeypatch.setenv("VAKIT_TEST_ZOOKEEPER", "yes")  # anything but "off" fails too
    with pytest.raises(pytest.fail.Exception):
        server_missing("VAKIT_TEST_ZOOKEEPER", "no ZooKeeper")
    monkeypatch.setenv("VAKIT_TEST_ZOOKEEPER", "off")
    with pytest.raises(pytest.skip.Exception, match="VAKIT_TEST_ZOOKEEPER=off"):
        server_missing("VAKIT_TEST_ZOOKEEPER", "no ZooKeeper")


def outcome(call: Callable[[], object]) -> str:
    """How ``call`` ended, caught here so that a skip cannot skip this test."""
    try:
        call()
    except BaseException as exc:  # pytest's fail and skip are BaseExceptions
        return f"{type(exc).__name__}: {exc}"
    return "returned"


def test_the_fixtures_fail_when_their_server_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(zkfixtures.ZK_TIER, raising=False)
    monkeypatch.delenv("VAKIT_TEST_KAFKA", raising=False)
    monkeypatch.setattr(zkfixtures, "zookeeper_available", lambda: False)
    monkeypatch.setattr(kafkafixtures, "tansu_available", lambda: False)
    assert outcome(zkfixtures._require_local).startswith("Failed: needs a local ZooKeeper")
    assert outcome(kafkafixtures._require_tansu).startswith("Failed: needs a Tansu broker")


PROBE = '''
def test_needs_zookeeper(zk_server):
    pass
'''


def run_probe(tmp_path: Path, **env: str) -> str:
    """A test that asks for the real ``zk_server`` fixture, run by a pytest of
    its own on a machine where no ZooKeeper can start: no ``java`` on PATH,
    no Docker engine at ``DOCKER_HOST``."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VAKIT_TEST_")}
    clean.update(PATH=str(tmp_path), DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock", **env)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "tests.zkfixtures",
         str(tmp_path / "test_probe.py")],
        cwd=REPO, env={**clean, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    return done.stdout + done.stderr


def test_a_zookeeper_test_fails_where_no_zookeeper_can_run(tmp_path: Path) -> None:
    out = run_probe(tmp_path)
    assert "1 error" in out or "1 failed" in out, out
    assert "no ZooKeeper: neither a local jar nor a Docker engine" in out, out
    assert "skipped" not in out, out
    out = run_probe(tmp_path, VAKIT_TEST_ZOOKEEPER="off")
    assert "1 skipped" in out and "VAKIT_TEST_ZOOKEEPER=off" in out, out
