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
from cluster.store.migrate import migrate_shard

__all__ = ["LocalCluster", "ready_banner"]


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
    api_port: int = 0
    api_metrics_port: int = 0
    zookeeper: bool = True
    kafka: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)
    durable: bool = True
    quiet: bool = False

    pg: list[PgServer] = field(default_factory=list, init=False)
    zk: Any = field(default=None, init=False)
    broker: Any = field(default=None, init=False)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list, init=False)
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
        self.state.update(
            shards=[{"port": s.port, "dir": str(s.data_dir)} for s in self.pg],
            token=self.token,
        )
        (self.data_dir / "cluster.json").write_text(json.dumps(self.state, indent=2))

    def start(self) -> None:
        self.data_dir = self.data_dir.resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # PostgreSQL runs as another user and must reach its directories.
        self.data_dir.chmod(0o755)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        self._load_state()
        self.token = self.state.get("token") or secrets.token_urlsafe(18)
        saved = self.state.get("shards", [])
        for i in range(self.shards):
            port = saved[i]["port"] if i < len(saved) and _port_free(saved[i]["port"]) else None
            server = PgServer(self.data_dir / f"pg{i}", port, durable=self.durable)
            self.say(f"starting PostgreSQL shard {i} on port {server.port}")
            server.start()
            self.pg.append(server)
            migrate_shard(server.dsn, i)
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
        self._spawn(
            "api",
            {
                **env,
                "VAKIT_API_PORT": str(self.api_port),
                "VAKIT_METRICS_HOST": env.get("VAKIT_METRICS_HOST", "127.0.0.1"),
                "VAKIT_API_METRICS_PORT": str(self.api_metrics_port),
            },
        )
        for w in range(self.workers):
            port = find_free_port()
            self.worker_ports.append(port)
            self._spawn(
                f"worker-{w}",
                {**env, "VAKIT_WORKER_ID": f"local-worker-{w}", "VAKIT_METRICS_PORT": str(port)},
            )

    def _env(self) -> dict[str, str]:
        # The production variables (VAKIT_…) the user exported are honoured;
        # the shards and a token are this cluster's own.
        env = dict(os.environ)
        env["VAKIT_SHARDS"] = ",".join(self.dsns)
        # The printed token is an operator's (it reads /api/v1/cluster and
        # /metrics) that acts as the owner service 'demo'.
        tokens = [t for t in [os.environ.get("VAKIT_OPERATOR_TOKENS", "")] if t]
        env["VAKIT_OPERATOR_TOKENS"] = ",".join([*tokens, f"{self.token}=demo"])
        # A local cluster fires at local services.
        env.setdefault("VAKIT_ALLOW_PRIVATE_TARGETS", "true")
        env.update(self.extra_env)
        return env

    def _spawn(self, name: str, env: dict[str, str]) -> None:
        role = "api" if name == "api" else "worker"
        log = open(self.data_dir / "logs" / f"{name}.log", "ab")  # lives as long as the child
        proc = subprocess.Popen(
            [sys.executable, "-m", "cluster.cli", role],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)

    def wait_ready(self, timeout: float = 90.0) -> dict[str, Any]:
        """Until the API is ready (every shard migrated and polled) and every
        worker has polled all its shards."""
        deadline = time.monotonic() + timeout
        last: Any = None
        urls = [self.api_url + "/readyz"] + [
            f"http://127.0.0.1:{p}/readyz" for p in self.worker_ports
        ]
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"a process exited early ({proc.args!r}); see {self.data_dir / 'logs'}"
                    )
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
        self.pg.clear()


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
            for proc in cluster.procs:
                if proc.poll() is not None:
                    print(
                        f"process {proc.args!r} exited with {proc.returncode}; stopping", flush=True
                    )
                    stop.set()
            stop.wait(1.0)
        return 0
    finally:
        print("stopping…", flush=True)
        cluster.stop()
        print("stopped.", flush=True)
