"""The campaign's cluster: PostgreSQL shards, a ZooKeeper server, the
recording target, and worker and API processes, each process reaching each
shard and ZooKeeper through a TCP proxy of its own (so one link can be cut
while the others work).

Everything is a real process started from ``cluster.local``'s servers and
``python -m cluster.cli``, as ``vakit up`` starts them; faults act on them
by pid, never by name. Every worker runs under libfaketime (Debian's
``faketime``, installed by ``make os-deps``) reading its offset from a file
of its own, so the nemesis can step one worker's wall clock while it runs
(through :mod:`benchmarks.campaign.steadysleep`, which keeps ``time.sleep``
working under it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

from cluster.local import PgServer, TcpProxy, ZkServer, find_free_port
from cluster.store import migrate_shard

__all__ = [
    "DISK_MB",
    "LIBFAKETIME",
    "OWNER",
    "SESSION_SECONDS",
    "TOKEN",
    "Cluster",
    "Proc",
    "Shard",
]

REPO = Path(__file__).resolve().parents[2]
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
TOKEN = "campaign-token"
OWNER = "campaign"
SESSION_SECONDS = 4.0  # ZooKeeper session timeout; the server ticks every 200 ms
DISK_MB = 320  # the full-disk shard's tmpfs: its data, a small WAL, room to fill

# Short leases and fast loops (as the fault tests use), so a lost worker's
# jobs come back within seconds and a campaign of minutes sees many faults.
_SETTINGS = {
    "allow_private_targets": "true",  # the target listens on loopback
    "api_tokens": f"{TOKEN}={OWNER}",
    "owner_create_rate": "0",
    "lease_seconds": "3",
    "lease_grace_seconds": "1",
    "reaper_interval": "0.5",
    "poll_interval": "0.2",
    "connect_timeout": "2",
    "stop_grace_seconds": "5",
    "backoff_base": "0.5",
    "backoff_max": "2",
    "zk_session_timeout": str(SESSION_SECONDS),
}


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            return 200 <= int(resp.status) < 300
    except urllib.error.HTTPError as exc:
        exc.close()
        return False
    except OSError:
        return False


@dataclass
class Proc:
    """One ``vakit worker``/``vakit api`` (or the target) process; restartable."""

    name: str
    args: list[str]
    env: dict[str, str]
    log_path: Path
    ready_url: str
    popen: subprocess.Popen[bytes] | None = None
    paused: bool = False
    _log: IO[bytes] | None = None

    def start(self) -> None:
        if self._log is None:
            self._log = open(self.log_path, "ab")  # closed in stop()
        self.popen = subprocess.Popen(
            [sys.executable, *self.args],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.paused = False

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not _http_ok(self.ready_url):
            if not self.alive():
                raise RuntimeError(f"{self.name} exited while starting; log {self.log_path}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name} not ready after {timeout:.0f} s; log {self.log_path}"
                )
            time.sleep(0.1)

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            assert self.popen is not None
            os.kill(self.popen.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(timeout=10)
        self.paused = False

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.paused:
            self.resume()
        self.signal(signal.SIGTERM)
        if self.popen is not None:
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass
class Shard:
    """One shard's PostgreSQL primary."""

    index: int
    server: PgServer
    paused_pids: list[int] = field(default_factory=list)
    # The small tmpfs its data directory lives on, for the full-disk fault;
    # None: on the machine's disk.
    disk: Path | None = None

    def pids(self) -> list[int]:
        """The postmaster and its backends: a frozen machine freezes them all."""
        pid = self.server.pid()
        if pid is None:
            return []
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            return [pid, *(c.pid for c in root.children(recursive=True))]
        return []

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend (a crash of the machine's
        processes; the files stay, as a restarted host finds them)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def pause(self) -> None:
        self.paused_pids = self.pids()
        for pid in self.paused_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self.paused_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.paused_pids = []

    def ensure_running(self, timeout: float = 60.0) -> None:
        """Start it again if it is down; a killed postmaster's backends may
        take a moment to leave its shared memory, so retry."""
        self.resume()
        deadline = time.monotonic() + timeout
        while True:
            pid = self.server.pid()
            if pid is not None and psutil.pid_exists(pid) and _pg_ready(self.server):
                return
            try:
                self.server.start(timeout=30)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


def _pg_ready(server: PgServer) -> bool:
    import psycopg

    try:
        with psycopg.connect(server.dsn, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


class Cluster:
    """Shards, ZooKeeper, the target and the processes of one campaign."""

    def __init__(
        self, out: Path, *, shards: int = 2, workers: int = 2, apis: int = 2, durable: bool = True
    ) -> None:
        self.out = out
        self.n_shards, self.n_workers, self.n_apis = shards, workers, apis
        # False only to show the checker catching a loss (``--unsafe-db``):
        # fsync and synchronous_commit off lose acknowledged commits when a
        # postmaster is killed.
        self.durable = durable
        self.data = Path(
            tempfile.mkdtemp(prefix="vakit-campaign-", dir=os.environ.get("VAKIT_BENCH_TMP"))
        )
        self.data.chmod(0o755)  # PostgreSQL runs as 'postgres' and must traverse it
        (out / "logs").mkdir(parents=True, exist_ok=True)
        self.shards: list[Shard] = []
        self.zk = ZkServer(self.data / "zk", tick_ms=200)
        self.proxies: dict[tuple[str, str], TcpProxy] = {}
        self.workers: list[Proc] = []
        self.apis: list[Proc] = []
        self.target: Proc | None = None
        self.target_url = ""
        self.clock_files: dict[str, Path] = {}
        self._mounted: Path | None = None

    # -- start -------------------------------------------------------------

    def start(self) -> None:
        self.shards = [
            Shard(i, PgServer(self.data / f"shard{i}", durable=self.durable))
            for i in range(self.n_shards)
        ]
        disk = self._small_disk()
        if disk is not None:
            # The last shard lives on it; a WAL kept small leaves the filler
            # the space, so the disk is full when the nemesis says so.
            self.shards[-1] = Shard(
                self.n_shards - 1,
                PgServer(
                    disk / "shard",
                    durable=self.durable,
                    extra_settings={"max_wal_size": "64MB", "min_wal_size": "32MB"},
                ),
                disk=disk,
            )
        with ThreadPoolExecutor(max_workers=self.n_shards + 1) as pool:
            started = [pool.submit(s.server.start) for s in self.shards]
            started.append(pool.submit(self.zk.start))
            for future in started:
                future.result()
        for shard in self.shards:
            migrate_shard(shard.server.dsn, shard.index)
        self._start_target()
        # Side by side: a process's start (imports) is most of a small
        # cluster's start on two cores, and the API's /healthz needs no worker.
        self.workers = [self._worker(f"worker-{i}") for i in range(self.n_workers)]
        self.apis = [self._api(f"api-{i}") for i in range(self.n_apis)]
        for proc in [*self.workers, *self.apis]:
            proc.wait_ready()

    def _small_disk(self) -> Path | None:
        """A small tmpfs for one shard (as tests/faults/test_disk_full.py
        mounts one), when this process may mount (root); else None and the
        full-disk fault is left out."""
        if os.geteuid() != 0:
            return None
        mount = self.data / "disk"
        mount.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m,mode=0755", "tmpfs", str(mount)],
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            return None
        self._mounted = mount
        shutil.chown(mount, "postgres", "postgres")
        return mount

    def _start_target(self) -> None:
        port = find_free_port()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        args = ["-m", "benchmarks.campaign.target", "--port", str(port)]
        args += ["--record", str(self.out / "firings.jsonl")]
        url = f"http://127.0.0.1:{port}"
        self.target = Proc("target", args, env, self.out / "logs" / "target.log", url + "/healthz")
        self.target.start()
        self.target.wait_ready()
        self.target_url = url + "/fire"

    def _links(self, name: str) -> dict[str, str]:
        """VAKIT_SHARDS and VAKIT_ZK for process ``name``, through its own proxies."""
        dsns = []
        for shard in self.shards:
            proxy = TcpProxy("127.0.0.1", shard.server.port, connect_timeout=2.0).start()
            self.proxies[(name, f"shard{shard.index}")] = proxy
            dsns.append(f"postgresql://postgres@{proxy.address}/postgres")
        zk = TcpProxy("127.0.0.1", self.zk.port, connect_timeout=2.0).start()
        self.proxies[(name, "zk")] = zk
        return {"VAKIT_SHARDS": ",".join(dsns), "VAKIT_ZK": f"{zk.address}/vakit"}

    def _env(self, name: str, **settings: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VAKIT_", "FAKETIME"))}
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = str(REPO)
        env.update({f"VAKIT_{k.upper()}": v for k, v in {**_SETTINGS, **settings}.items()})
        env.update(self._links(name))
        return env

    def _worker(self, name: str) -> Proc:
        port = find_free_port()
        env = self._env(name, worker_id=name, metrics_port=str(port))
        clock = self.out / "logs" / f"clock-{name}"
        clock.write_text("+0\n")
        self.clock_files[name] = clock
        # The offset is re-read at most once a second; the monotonic clock
        # is left alone, as a wall-clock step leaves it.
        env.update(
            LD_PRELOAD=str(LIBFAKETIME),
            FAKETIME_TIMESTAMP_FILE=str(clock),
            FAKETIME_CACHE_DURATION="1",
            FAKETIME_DONT_FAKE_MONOTONIC="1",
        )
        log = self.out / "logs" / f"{name}.log"
        proc = Proc(
            name,
            ["-m", "benchmarks.campaign.steadysleep", "worker"],
            env,
            log,
            f"http://127.0.0.1:{port}/readyz",
        )
        proc.start()
        return proc

    def _api(self, name: str) -> Proc:
        port = find_free_port()
        env = self._env(name, api_port=str(port))
        log = self.out / "logs" / f"{name}.log"
        proc = Proc(
            name, ["-m", "cluster.cli", "api"], env, log, f"http://127.0.0.1:{port}/healthz"
        )
        proc.start()
        return proc

    @property
    def api_urls(self) -> list[str]:
        return [p.ready_url.removesuffix("/healthz") for p in self.apis]

    def set_clock(self, worker: str, offset: str) -> None:
        self.clock_files[worker].write_text(offset + "\n")

    # -- heal and stop -----------------------------------------------------

    def heal(self) -> None:
        """Undo every fault: links restored, clocks right, disks with room,
        everything running."""
        for shard in self.shards:
            if shard.disk is not None:
                (shard.disk / "filler").unlink(missing_ok=True)
        for proxy in self.proxies.values():
            proxy.drop_reply_after(b"", times=0)
            proxy.restore()
        for name in self.clock_files:
            self.set_clock(name, "+0")
        for shard in self.shards:
            shard.ensure_running()
        if not self.zk.running():
            self.zk.start()
        for proc in [*self.workers, *self.apis]:
            if proc.paused:
                proc.resume()
            if not proc.alive():
                proc.start()
        for proc in [*self.workers, *self.apis]:
            proc.wait_ready()

    def stop(self) -> None:
        for proc in [*self.apis, *self.workers]:
            with contextlib.suppress(Exception):
                proc.stop()
        for proxy in self.proxies.values():
            proxy.stop()
        if self.target is not None:
            self.target.stop()
        with contextlib.suppress(Exception):
            self.zk.stop()
        for shard in self.shards:
            shard.resume()
            with contextlib.suppress(Exception):
                shard.server.stop()
        if self._mounted is not None:
            subprocess.run(["umount", "-l", str(self._mounted)], check=False)
        shutil.rmtree(self.data, ignore_errors=True)
