"""`vakit up` checks its children's configuration before it starts anything,
and a child that dies shows the end of its own log."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from cluster.config import describe_invalid, settings_in
from cluster.local.localcluster import ChildExited, LocalCluster, log_tail


def test_a_bad_limit_is_found_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAKIT_OWNER_CREATE_BURST", "0")
    cluster = LocalCluster(tmp_path / "data", zookeeper=False, kafka=False)
    with pytest.raises(ValidationError) as caught:
        cluster.check_config()
    assert describe_invalid(caught.value) == (
        "VAKIT_OWNER_CREATE_BURST: Input should be greater than or equal to 1"
    )
    assert not (tmp_path / "data").exists()  # no shard, no log directory


def test_a_good_configuration_passes_and_the_environment_is_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAKIT_OWNER_CREATE_BURST", "5")
    monkeypatch.setenv("VAKIT_OPERATOR_TOKENS", "ops-token-0123456789=ops")
    before = dict(os.environ)
    LocalCluster(tmp_path, workers=3).check_config()
    assert dict(os.environ) == before


def test_settings_in_reads_only_the_given_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VAKIT_CLAIM_BATCH", "0")  # would be refused, but is not given
    settings = settings_in({"VAKIT_CLAIM_BATCH": "7", "VAKIT_SHARDS": "host=a dbname=b"})
    assert settings.claim_batch == 7 and settings.shards == ["host=a dbname=b"]
    assert os.environ["VAKIT_CLAIM_BATCH"] == "0"


def test_log_tail_reads_this_runs_lines_only(tmp_path: Path) -> None:
    log = tmp_path / "worker-0.log"
    log.write_text("old run\n")
    start = log.stat().st_size
    with log.open("a") as f:
        f.write("".join(f"line {i}\n\n" for i in range(30)))
    assert log_tail(log, start) == [f"line {i}" for i in range(10, 30)]
    assert log_tail(tmp_path / "missing.log") == []


def test_a_child_that_exits_early_shows_the_end_of_its_log(tmp_path: Path) -> None:
    # A real worker process with no shards: it stops at once with its reason.
    cluster = LocalCluster(tmp_path, zookeeper=False, kafka=False)
    cluster.token = "local-token"
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "worker-0.log").write_text("Error: from an earlier run\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAKIT_")}
    cluster._spawn("worker-0", {**env, **cluster._env()})
    deadline = time.monotonic() + 60
    while (dead := cluster.exited()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert isinstance(dead, ChildExited)
    assert dead.name == "worker-0" and dead.code != 0
    assert dead.tail and "VAKIT_SHARDS" in dead.tail[-1], dead.tail
    assert "earlier run" not in str(dead)
    assert str(dead).startswith(f"worker-0 exited early with code {dead.code}; the end of ")
