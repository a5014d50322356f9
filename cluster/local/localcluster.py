"""``vakit up``: a whole local cluster in one foreground command.

N PostgreSQL clusters (initdb under the data dir, reused on restart), an
optional local ZooKeeper, the API and W worker processes. Ctrl-C (SIGINT) or
SIGTERM stops everything it started, PostgreSQL included.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.local.childproc import find_free_port
from cluster.local.pgserver import PgServer
from cluster.local.replica import (
    ReplicatedShard,
    forget_standbys,
    start_standby,
    sync_primary_settings,
)
from cluster.store.migrate import migrate_shard

__all__ = ["ChildExited", "LocalCluster", "ready_banner"]

# Lines of a dead child's log shown with the error: enough for a traceback's
# end or a configuration error, short enough to read in a terminal.
TAIL_LINES = 20


class ChildExited(RuntimeError):
    """A child process (the API, a worker) exited before it was stopped; the
    message ends with the last lines of its own log, where its reason is."""

    def __init__(self, name: str, code: int, log: Path, tail: list[str]) -> None:
        self.name, self.code, self.log, self.tail = name, code, log, tail
        shown = "\n".join(f"  | {line}" for line in tail) if tail else "  (its log is empty)"
        super().__init__(f"{name} exited early with code {code}; the end of {log}:\n{shown}")


def log_tail(path: Path, start: int = 0, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` non-blank lines written to ``path`` after byte ``start``."""
    try:
        with path.open("rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [ln for ln in text.splitlines() if ln.strip()][-lines:]


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@dataclass
class LocalCluster:
    data_dir: Path
    shards: int = 2
    workers: int = 2
    # Synchronous streaming standbys per shard (0 or 1): the shard's DSN
    # lists them all (multi-host), and the supervisor promotes a standby
    # when its primary dies.
    replicas: int = 0
    api_port: int = 0
    api_metrics_port: int = 0
    zookeeper: bool = True
    kafka: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)
    durable: bool = True
    quiet: bool = False

    pg: list[PgServer] = field(default_factory=list, init=False)
    replicated: list[ReplicatedShard] = field(default_factory=list, init=False)
    zk: Any = field(default=None, init=False)
    broker: Any = field(default=None, init=False)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list, init=False)
    # Per child: its name, log and where this run's lines start in it (the
    # log is appended to across restarts of the cluster).
    children: dict[int, tuple[str, Path, int]] = field(default_factory=dict, init=False)
    token: str = field(default="", init=False)
    worker_ports: list[int] = field(default_factory=list, init=False)
    state: dict[str, Any] = field(default_factory=dict, init=False)

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def dsns(self) -> list[str]:
        if self.replicated:
            return [shard.dsn("postgres") for shard in self.replicated]
        return [s.dsn for s in self.pg]

    def _load_state(self) -> None:
        path = self.data_dir / "cluster.json"
        self.state = json.loads(path.read_text()) if path.exists() else {}
        saved = self.state.get("shards", [])
        if saved and len(saved) != self.shards:
            raise SystemExit(
                f"{self.data_dir} holds a {len(saved)}-shard cluster; start it with "
                f"--shards {len(saved)} or use another --data-dir (job ids route by shard count)"
            )

    def _save_state(self) -> None:
        primaries = [r.primary for r in self.replicated] if self.replicated else self.pg
        self.state.update(
            shards=[{"port": s.port, "dir": str(s.data_dir)} for s in primaries],
            standbys=[
                [{"port": s.port, "dir": str(s.data_dir)} for s in r.servers[1:]]
                for r in self.replicated
            ],
            token=self.token,
        )
        (self.data_dir / "cluster.json").write_text(json.dumps(self.state, indent=2))

    def check_config(self) -> None:
        """Load the settings each child will load, before anything starts: a
        bad VAKIT_… variable (or VAKIT_CONFIG file) stops `vakit up` with its
        reason rather than with a child that exits after the shards started.
        The shards, ZooKeeper and broker addresses are placeholders of the
        same shape as the real ones (those are this command's own)."""
        from cluster.config import settings_in

        # The token is made in start(); any of its shape checks the same.
        env = self._env(self.token or secrets.token_urlsafe(18))
        env["VAKIT_SHARDS"] = ",".join(
            f"host=127.0.0.1 port=5432 dbname=vakit_{i}" for i in range(self.shards)
        )
        if self.zookeeper:
            env["VAKIT_ZK"] = "127.0.0.1:2181/vakit"
        for role_env in (self._api_env(env, 0, 0), self._worker_env(env, 0, 0)):
            settings_in(role_env)

    def start(self) -> None:
        self.data_dir = self.data_dir.resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # PostgreSQL runs as another user and must reach its directories.
        self.data_dir.chmod(0o755)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        self._load_state()
        self.token = self.state.get("token") or secrets.token_urlsafe(18)
        saved = self.state.get("shards", [])
        saved_standbys = self.state.get("standbys", [])
        for i in range(self.shards):
            port = saved[i]["port"] if i < len(saved) and _port_free(saved[i]["port"]) else None
            # After a promotion the state names the promoted server's directory.
            where = Path(saved[i]["dir"]) if i < len(saved) else self.data_dir / f"pg{i}"
            server = PgServer(
                where,
                port,
                durable=self.durable,
                extra_settings=sync_primary_settings() if self.replicas else None,
            )
            self.say(f"starting PostgreSQL shard {i} on port {server.port}")
            server.start()
            self.pg.append(server)
            # A standby named by an earlier run is not there yet.
            forget_standbys(server)
            migrate_shard(server.dsn, i)
            if self.replicas:
                self.replicated.append(self._standbys(i, server, saved_standbys))
        self._save_state()
        env = self._env()
        if self.zookeeper:
            from cluster.local.zkserver import ZkServer

            self.zk = ZkServer(self.data_dir / "zk")
            self.say("starting ZooKeeper")
            self.zk.start()
            env["VAKIT_ZK"] = self.zk.connect_string + "/vakit"
        if self.kafka:
            from cluster.local.kafkaserver import TansuBroker, TansuNotFound

            try:
                self.broker = TansuBroker(self.data_dir / "kafka")
                self.say("starting a Kafka-compatible broker (Tansu, in memory)")
                self.broker.start()
                env["VAKIT_KAFKA_BOOTSTRAP"] = self.broker.bootstrap
            except TansuNotFound as exc:
                self.say(f"no Kafka broker: {exc} (KAFKA targets disabled)")
                self.broker = None
        if not self.api_port:
            self.api_port = find_free_port()
        if not self.api_metrics_port:
            self.api_metrics_port = find_free_port()
        # The API's /metrics on loopback only, no token (and on the API port
        # to the operator token).
        self._spawn("api", self._api_env(env, self.api_port, self.api_metrics_port))
        for w in range(self.workers):
            port = find_free_port()
            self.worker_ports.append(port)
            self._spawn(f"worker-{w}", self._worker_env(env, w, port))

    def _standbys(
        self, shard: int, primary: PgServer, saved: list[list[dict[str, Any]]]
    ) -> ReplicatedShard:
        """Shard ``shard``'s standbys, each a fresh copy of ``primary`` (one
        left from before a promotion has diverged from it)."""
        servers = [primary]
        for r in range(self.replicas):
            old = saved[shard][r] if shard < len(saved) and r < len(saved[shard]) else {}
            # The directory not in use by the primary (they swap on promotion).
            names = [f"pg{shard}", f"pg{shard}-standby{r}"]
            name = next(n for n in names if self.data_dir / n != primary.data_dir)
            port = old.get("port") if old and _port_free(old["port"]) else None
            self.say(f"starting a synchronous standby of shard {shard}")
            servers.append(start_standby(primary, self.data_dir / name, port, durable=self.durable))
        return ReplicatedShard(servers)

    def fail_over_lost_primaries(self) -> list[str]:
        """Promote the standby of every shard whose primary is gone (what
        Patroni does in production); one line per promotion."""
        said = []
        for i, shard in enumerate(self.replicated):
            if len(shard.servers) > 1 and shard.primary_lost():
                lost = shard.primary.port
                took = shard.fail_over()
                said.append(
                    f"shard {i}: primary on port {lost} lost; standby on port "
                    f"{shard.primary.port} promoted in {took:.2f} s"
                )
                self._save_state()
        return said

    @staticmethod
    def _api_env(env: dict[str, str], port: int, metrics_port: int) -> dict[str, str]:
        return {
            **env,
            "VAKIT_API_PORT": str(port),
            "VAKIT_METRICS_HOST": env.get("VAKIT_METRICS_HOST", "127.0.0.1"),
            "VAKIT_API_METRICS_PORT": str(metrics_port),
        }

    @staticmethod
    def _worker_env(env: dict[str, str], index: int, port: int) -> dict[str, str]:
        return {**env, "VAKIT_WORKER_ID": f"local-worker-{index}", "VAKIT_METRICS_PORT": str(port)}

    def _env(self, token: str = "") -> dict[str, str]:
        # The production variables (VAKIT_…) the user exported are honoured;
        # the shards and a token are this cluster's own.
        env = dict(os.environ)
        # A replicated shard's DSN lists several hosts, with commas: a JSON list.
        multi = any("," in dsn for dsn in self.dsns)
        env["VAKIT_SHARDS"] = json.dumps(self.dsns) if multi else ",".join(self.dsns)
        # The printed token is an operator's (it reads /api/v1/cluster and
        # /metrics) that acts as the owner service 'demo'.
        tokens = [t for t in [os.environ.get("VAKIT_OPERATOR_TOKENS", "")] if t]
        env["VAKIT_OPERATOR_TOKENS"] = ",".join([*tokens, f"{token or self.token}=demo"])
        # A local cluster fires at local services.
        env.setdefault("VAKIT_ALLOW_PRIVATE_TARGETS", "true")
        env.update(self.extra_env)
        return env

    def _spawn(self, name: str, env: dict[str, str]) -> None:
        role = "api" if name == "api" else "worker"
        path = self.data_dir / "logs" / f"{name}.log"
        # The child holds its own copy of the descriptor; ours closes here.
        with open(path, "ab") as log:
            start = log.seek(0, os.SEEK_END)
            proc = subprocess.Popen(
                [sys.executable, "-m", "cluster.cli", role],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        self.children[proc.pid] = (name, path, start)

    def exited(self) -> ChildExited | None:
        """The first child that has exited, with the end of its log; None
        while all of them run."""
        for proc in self.procs:
            if proc.poll() is not None:
                name, path, start = self.children[proc.pid]
                return ChildExited(name, proc.returncode, path, log_tail(path, start))
        return None

    def wait_ready(self, timeout: float = 90.0) -> dict[str, Any]:
        """Until the API is ready (every shard migrated and polled) and every
        worker has polled all its shards."""
        deadline = time.monotonic() + timeout
        last: Any = None
        urls = [self.api_url + "/readyz"] + [
            f"http://127.0.0.1:{p}/readyz" for p in self.worker_ports
        ]
        while time.monotonic() < deadline:
            dead = self.exited()
            if dead is not None:
                raise dead
            try:
                answers = []
                for url in urls:
                    with urllib.request.urlopen(url, timeout=2) as resp:
                        answers.append(json.loads(resp.read()))
                return dict(answers[0])
            except urllib.error.HTTPError as exc:
                last = f"{exc.url}: {exc.read().decode(errors='replace')}"
            except OSError as exc:
                last = exc
            time.sleep(0.25)
        raise TimeoutError(f"cluster not ready after {timeout:.0f} s: {last}")

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 25
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        if self.broker is not None:
            self.broker.kill()  # in-memory: nothing to flush
            self.broker = None
        if self.zk is not None:
            self.zk.stop()
            self.zk = None
        for server in self.pg:
            server.stop()
        for shard in self.replicated:
            for server in shard.servers:
                server.stop()
        self.pg.clear()
        self.replicated.clear()


def ready_banner(cluster: LocalCluster, seconds: float) -> str:
    """What `vakit up` prints once the cluster is ready: every address a
    user or a Prometheus needs, the workers' /metrics (with their lateness
    and firing series) as well as the API's."""
    workers = "\n".join(
        f"             http://127.0.0.1:{port}/metrics   (worker {i}; also /healthz, /readyz)"
        for i, port in enumerate(cluster.worker_ports)
    )
    return (
        f"\nVakit is ready in {seconds:.1f} s\n"
        f"  API:       {cluster.api_url}/api/v1   (OpenAPI: {cluster.api_url}/openapi.json)\n"
        f"  token:     {cluster.token}   (an operator token; acts as owner service 'demo')\n"
        f"  metrics:   http://127.0.0.1:{cluster.api_metrics_port}/metrics   (the API; loopback only)\n"
        + (workers + "\n" if workers else "")
        + f"  shards:    {', '.join(cluster.dsns)}\n"
        f"  ZooKeeper: {cluster.zk.connect_string if cluster.zk else 'off'}\n"
        f"  Kafka:     {cluster.broker.bootstrap if cluster.broker else 'off'}\n"
        f"  data:      {cluster.data_dir}   (logs in {cluster.data_dir / 'logs'})\n"
        f"\n  curl -H 'Authorization: Bearer {cluster.token}' {cluster.api_url}/api/v1/cluster\n"
        "\nCtrl-C stops everything.\n"
    )


def run_foreground(cluster: LocalCluster, demo: bool) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    try:
        cluster.start()
        cluster.wait_ready()
        print(ready_banner(cluster, time.monotonic() - started), flush=True)
        if demo:
            from cluster.local.demo import run_demo

            run_demo(cluster.api_url, cluster.token, stop)
        while not stop.is_set():
            dead = cluster.exited()
            if dead is not None:
                print(f"{dead}\nstopping the others", flush=True)
                stop.set()
            for line in cluster.fail_over_lost_primaries():
                print(line, flush=True)
            stop.wait(1.0)
        return 0
    finally:
        print("stopping…", flush=True)
        cluster.stop()
        print("stopped.", flush=True)
