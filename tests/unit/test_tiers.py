"""A missing ZooKeeper or Kafka fails the tests that need it; only an explicit
``VAKIT_TEST_…=off`` skips them (tests/tiers.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests import kafkafixtures, zkfixtures
from tests.tiers import server_missing


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
