"""Local ZooKeeper processes: one standalone server or a small ensemble.

``vakit up`` and the tests run ZooKeeper from the jar a Debian ``zookeeper``
package installs (``/usr/share/java/zookeeper.jar``), as child processes of the
caller, on loopback ports. Each server lives in its own directory::

    {data_dir}/conf/zoo.cfg, log4j.properties
    {data_dir}/data/           snapshots, transaction logs, myid
    {data_dir}/zookeeper.log   the JVM's stdout and stderr

A server keeps its port across ``stop()``/``start()``, so a restart on the same
directory looks to clients like the same server coming back (sessions survive,
since ZooKeeper persists them).

Every server runs in its own process group and is killed on interpreter exit if
the caller forgot to stop it; a SIGKILL of the caller itself still leaks the JVM
(the lifecycle is :class:`cluster.childproc.ChildProcess`'s).
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cluster.local.childproc import (
    LOOPBACK,
    ChildProcess,
    StartStopContext,
    free_ports,
)

__all__ = [
    "DEFAULT_ZK_JAR",
    "QuorumPeer",
    "ZkEnsemble",
    "ZkServer",
    "ZkServerError",
    "four_letter_word",
    "zookeeper_available",
]

DEFAULT_ZK_JAR = Path(os.environ.get("VAKIT_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))

# The Debian jar's manifest pulls in slf4j-api but no binding, so the server
# would log nothing at all. These two give it log4j 1.2, which reads the
# log4j.properties we write into the conf dir.
_LOG_JARS = (Path("/usr/share/java/slf4j-log4j12.jar"), Path("/usr/share/java/log4j-1.2.jar"))

_LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""

# A small heap and the client compiler start the JVM in about a second, which
# is what tests and a local cluster care about; neither holds much data.
_DEFAULT_JVM_FLAGS = (
    "-Xms32m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.jmx.log4j.disable=true",
)


class ZkServerError(RuntimeError):
    """A ZooKeeper process did not start or answer; the message carries its log tail."""


def zookeeper_available(jar: Path = DEFAULT_ZK_JAR) -> bool:
    """Can :class:`ZkServer` run here (a ``java`` binary and the ZooKeeper jar)?"""
    return jar.is_file() and shutil.which("java") is not None


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``, ``mntr``, ...)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


@dataclass(frozen=True)
class QuorumPeer:
    """One member of an ensemble, as every member's ``server.N`` line names it."""

    server_id: int
    host: str
    quorum_port: int
    election_port: int


class ZkServer(ChildProcess):
    """One ZooKeeper server process.

    Standalone by default; given ``server_id`` and ``peers`` it is a member of
    an ensemble (see :class:`ZkEnsemble`). ``tick_ms`` is ZooKeeper's
    ``tickTime``: session expiry is checked at that granularity, and the
    allowed session timeouts default to [``min_session_timeout_ms``, 60 s].
    """

    log_name = "zookeeper.log"
    label = "ZooKeeper"
    error = ZkServerError
    port_in_use = "Address already in use"

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        tick_ms: int = 2000,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 60_000,
        force_sync: bool = True,
        server_id: int | None = None,
        peers: Sequence[QuorumPeer] = (),
        java: str = "java",
        jar: Path = DEFAULT_ZK_JAR,
        jvm_flags: Sequence[str] = _DEFAULT_JVM_FLAGS,
    ) -> None:
        if (server_id is None) != (not peers):
            raise ValueError("server_id and peers go together (an ensemble member) or not at all")
        super().__init__(data_dir, port=port)
        self.tick_ms = tick_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.force_sync = force_sync
        self.server_id = server_id
        self.peers = tuple(peers)
        self.java = java
        self.jar = jar
        self.jvm_flags = tuple(jvm_flags)

    # -- paths and config -------------------------------------------------

    @property
    def connect_string(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def conf_dir(self) -> Path:
        return self.data_dir / "conf"

    def _config(self) -> str:
        lines = [
            f"tickTime={self.tick_ms}",
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={LOOPBACK}",
            f"minSessionTimeout={self.min_session_timeout_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            # Tests open many clients from 127.0.0.1; the default caps them at 60.
            "maxClientCnxns=0",
            f"forceSync={'yes' if self.force_sync else 'no'}",
        ]
        if self.peers:
            # In ticks; generous so a busy test machine does not drop followers.
            lines += ["initLimit=20", "syncLimit=10", "reconfigEnabled=false"]
            lines += [
                f"server.{p.server_id}={p.host}:{p.quorum_port}:{p.election_port}"
                for p in self.peers
            ]
        return "\n".join(lines) + "\n"

    def _command(self) -> list[str]:
        classpath = [str(self.conf_dir), str(self.jar)]
        classpath += [str(jar) for jar in _LOG_JARS if jar.is_file()]
        main = (
            "org.apache.zookeeper.server.quorum.QuorumPeerMain"
            if self.peers
            else "org.apache.zookeeper.server.ZooKeeperServerMain"
        )
        return [
            self.java,
            *self.jvm_flags,
            f"-Dlog4j.configuration=file:{self.conf_dir / 'log4j.properties'}",
            # A standalone server restarted on a data dir holding a log but no
            # snapshot would refuse to start otherwise.
            "-Dzookeeper.snapshot.trust.empty=true",
            "-cp",
            os.pathsep.join(classpath),
            main,
            str(self.conf_dir / "zoo.cfg"),
        ]

    def _write_files(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "zoo.cfg").write_text(self._config())
        (self.conf_dir / "log4j.properties").write_text(_LOG4J_PROPERTIES)
        if self.server_id is not None:
            (self.data_dir / "data" / "myid").write_text(f"{self.server_id}\n")

    # -- lifecycle --------------------------------------------------------

    def launch(self) -> None:
        """Start the process without waiting for it to serve (see :meth:`wait_serving`)."""
        with self._lock:
            if self.running():
                return
            if not self.jar.is_file():
                raise ZkServerError(f"ZooKeeper jar not found at {self.jar}")
            self._write_files()
            self._spawn(self._command())

    def wait_serving(self, timeout: float = 30.0) -> None:
        """Wait until the server answers ``srvr`` with a mode (standalone, leader, follower)."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            if self.mode() is not None:
                return
            if time.monotonic() >= deadline:
                self._give_up(f"did not serve within {timeout:.0f} s")
            time.sleep(0.05)

    def mode(self) -> str | None:
        """``standalone``, ``leader`` or ``follower`` while serving; None otherwise."""
        try:
            answer = four_letter_word(LOOPBACK, self.port, "srvr", timeout=0.5)
        except OSError:
            return None
        for line in answer.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None


class ZkEnsemble(StartStopContext):
    """``size`` ZooKeeper servers on loopback forming one ensemble (quorum)."""

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        *,
        size: int = 3,
        tick_ms: int = 2000,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 60_000,
        force_sync: bool = True,
        java: str = "java",
        jar: Path = DEFAULT_ZK_JAR,
    ) -> None:
        if size < 1:
            raise ValueError("an ensemble needs at least one server")
        root = Path(root_dir)
        ports = free_ports(3 * size)
        peers = [
            QuorumPeer(i + 1, LOOPBACK, ports[3 * i + 1], ports[3 * i + 2]) for i in range(size)
        ]
        self.servers: list[ZkServer] = [
            ZkServer(
                root / f"zk{peer.server_id}",
                port=ports[3 * i],
                tick_ms=tick_ms,
                min_session_timeout_ms=min_session_timeout_ms,
                max_session_timeout_ms=max_session_timeout_ms,
                force_sync=force_sync,
                server_id=peer.server_id,
                peers=peers,
                java=java,
                jar=jar,
            )
            for i, peer in enumerate(peers)
        ]

    @property
    def connect_string(self) -> str:
        return ",".join(s.connect_string for s in self.servers)

    def start(self, timeout: float = 60.0) -> None:
        """Start every member and wait until each serves (a quorum has formed)."""
        try:
            for server in self.servers:
                server.launch()
            deadline = time.monotonic() + timeout
            for server in self.servers:
                server.wait_serving(max(0.1, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def kill(self, index: int) -> None:
        self.servers[index].kill()

    def leader(self) -> int | None:
        """Index of the member that leads the quorum now, if any answers so."""
        for i, server in enumerate(self.servers):
            if server.running() and server.mode() == "leader":
                return i
        return None
