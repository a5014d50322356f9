"""ZooKeeper for the tests: real servers, started by the fixtures.

* ``zk_server``: one standalone server for the whole run (tickTime 200 ms, so
  sessions of 2 to 4 s expire on time), from the local ``zookeeper`` jar, or
  from a container when there is no jar but a Docker engine answers.
* ``zk_connect``: a connect string with a fresh chroot per test, so tests never
  see each other's nodes.
* ``zk_ensemble``: a three-node ensemble for the tests that need a quorum.
* ``zk_server_factory``: private servers a test may kill, pause and restart.

A missing ZooKeeper fails the tests that need it (:mod:`tests.tiers`);
``VAKIT_TEST_ZOOKEEPER=off`` skips them instead.

Loaded from ``tests/conftest.py`` through ``pytest_plugins``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from kazoo.client import KazooClient

from cluster.local.zkserver import ZkEnsemble, ZkServer, four_letter_word, zookeeper_available
from tests.tiers import server_missing

__all__ = [
    "TEST_TICK_MS",
    "ZkEndpoint",
    "docker_available",
    "zk_connect",
    "zk_ensemble",
    "zk_server",
    "zk_server_factory",
]

TEST_TICK_MS = 200
# Without ZooKeeper its tests fail; this variable set to "off" skips them.
ZK_TIER = "VAKIT_TEST_ZOOKEEPER"
_ZK_IMAGE = "zookeeper:3.8"


class ZkEndpoint(Protocol):
    """What tests need of a ZooKeeper they did not start themselves."""

    @property
    def connect_string(self) -> str: ...

    def stop(self) -> None: ...


def docker_available(timeout: float = 2.0) -> bool:
    """Does a Docker engine answer? Quick, and never hangs when there is none."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host and not Path("/var/run/docker.sock").exists():
        return False
    try:
        with warnings.catch_warnings():
            # Third-party imports may warn; the run treats warnings as errors.
            warnings.simplefilter("ignore")
            import docker
            import testcontainers  # noqa: F401

            client = docker.from_env(timeout=timeout)
            try:
                return bool(client.ping())
            finally:
                client.close()
    except Exception:
        return False


def _base_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("VAKIT_TEST_TMP")))


class _ContainerZk:
    """A ZooKeeper container, used only when there is no local jar."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from testcontainers.core.container import DockerContainer

            self._container: Any = (
                DockerContainer(_ZK_IMAGE)
                .with_env("ZOO_TICK_TIME", str(TEST_TICK_MS))
                .with_env("ZOO_4LW_COMMANDS_WHITELIST", "*")
                .with_env("ZOO_ADMINSERVER_ENABLED", "false")
                .with_env("ZOO_MAX_CLIENT_CNXNS", "0")
                .with_env("ZOO_CFG_EXTRA", "minSessionTimeout=400 maxSessionTimeout=60000")
                .with_exposed_ports(2181)
            )
            self._container.start()
        host = self._container.get_container_host_ip()
        port = int(self._container.get_exposed_port(2181))
        self.connect_string = f"{host}:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if four_letter_word(host, port, "ruok") == "imok":
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper container at {self.connect_string} never answered")
            time.sleep(0.2)

    def stop(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._container.stop()


def _require_local() -> None:
    if not zookeeper_available():
        server_missing(ZK_TIER, "needs a local ZooKeeper (java and /usr/share/java/zookeeper.jar)")


@pytest.fixture(scope="session")
def zk_server() -> Iterator[ZkEndpoint]:
    """One ZooKeeper for the whole run; tests isolate themselves by chroot."""
    if zookeeper_available():
        base = _base_dir("vakit-test-zk-")
        server = ZkServer(base, tick_ms=TEST_TICK_MS, min_session_timeout_ms=400, force_sync=False)
        server.start()
        try:
            yield server
        finally:
            server.stop()
            shutil.rmtree(base, ignore_errors=True)
    elif docker_available():
        container = _ContainerZk()
        try:
            yield container
        finally:
            container.stop()
    else:
        server_missing(ZK_TIER, "no ZooKeeper: neither a local jar nor a Docker engine")


def _delete_tree(connect: str, path: str) -> None:
    client = KazooClient(hosts=connect, timeout=5.0)
    try:
        client.start(timeout=5.0)
        client.delete(path, recursive=True)
    except Exception:
        pass  # best effort: a leftover chroot only costs a little memory
    finally:
        with contextlib.suppress(Exception):
            client.stop()
            client.close()


@pytest.fixture
def zk_connect(zk_server: ZkEndpoint) -> Iterator[str]:
    """``host:port/t-<uuid>``: a chroot of its own, created empty for this test."""
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    client = KazooClient(hosts=zk_server.connect_string, timeout=5.0)
    client.start(timeout=10.0)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
    yield zk_server.connect_string + chroot
    _delete_tree(zk_server.connect_string, chroot)


@pytest.fixture
def zk_server_factory() -> Iterator[Callable[..., ZkServer]]:
    """Make private local servers (tick 200 ms) that a test may kill and restart."""
    _require_local()
    base = _base_dir("vakit-test-zkp-")
    made: list[ZkServer] = []

    def make(**kwargs: Any) -> ZkServer:
        kwargs.setdefault("tick_ms", TEST_TICK_MS)
        kwargs.setdefault("min_session_timeout_ms", 400)
        kwargs.setdefault("force_sync", False)
        server = ZkServer(base / f"zk{len(made)}", **kwargs)
        made.append(server)
        server.start()
        return server

    try:
        yield make
    finally:
        for server in made:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def zk_ensemble() -> Iterator[ZkEnsemble]:
    """Three local servers forming one quorum, for this test alone."""
    _require_local()
    base = _base_dir("vakit-test-zke-")
    ensemble = ZkEnsemble(
        base, size=3, tick_ms=TEST_TICK_MS, min_session_timeout_ms=400, force_sync=False
    )
    ensemble.start()
    try:
        yield ensemble
    finally:
        ensemble.stop()
        shutil.rmtree(base, ignore_errors=True)
