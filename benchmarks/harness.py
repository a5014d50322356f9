"""The benchmark cluster: PostgreSQL shards and the worker, API and sink
processes, plus a sampler of their memory and CPU.

Everything :class:`BenchCluster` starts it also stops, in reverse order, when
its ``with`` block ends, whether by success, an exception or Ctrl-C: the
processes run in their own sessions, so a terminal's Ctrl-C reaches only the
harness, which then stops them in order instead of leaving orphans.

Workers run without ZooKeeper (``VAKIT_ZK`` is not passed on unless given
with ``--env``): every worker polls every shard, as a small cluster would.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, TypeVar

import psutil
import psycopg
from psycopg.rows import dict_row

from benchmarks.progress import Progress
from benchmarks.report import summary_line
from benchmarks.sql import query
from cluster.local import PgServer, TansuBroker, ZkServer, find_free_port
from cluster.store import migrate_shard

__all__ = [
    "REPO_ROOT",
    "BenchCluster",
    "ClusterSpec",
    "ProcessSampler",
    "UsageMark",
    "WindowUsage",
    "bench_main",
    "new_run",
    "parse_env_pairs",
    "setup_logging",
    "terminate_on_sigterm",
]

REPO_ROOT = Path(__file__).resolve().parents[1]

log = logging.getLogger("benchmarks.harness")

_Options = TypeVar("_Options")

# Variables a benchmark must not inherit from the shell: coordination would
# change who polls what, and a config file could override the knobs we set.
_NOT_INHERITED = ("VAKIT_ZK", "VAKIT_CONFIG")

# pg_stat_statements' counters summed over the shards per statement: time,
# and the buffers and WAL that tell one statement's cost in two runs apart.
_SUMMED = (
    "calls", "total_ms", "rows", "shared_blks_hit", "shared_blks_read",
    "shared_blks_dirtied", "wal_records", "wal_fpi", "wal_bytes",
)  # fmt: skip


def setup_logging(verbose: bool) -> None:
    """Warnings only by default (a run prints one summary line); ``verbose``
    adds the harness's progress, which helps on a long run."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if verbose:
        logging.getLogger("benchmarks").setLevel(logging.INFO)


def parse_env_pairs(items: list[str]) -> dict[str, str]:
    """``["VAKIT_COMPLETE_BATCH=1000", …]`` from repeated ``--env`` options."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("VAKIT_"):
            raise ValueError(f"--env expects VAKIT_NAME=value, got {item!r}")
        out[key] = value
    return out


@contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt for the duration, so ``kill`` stops
    a benchmark as cleanly as Ctrl-C does (the ``finally`` blocks run)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def bench_main(
    name: str,
    argv: list[str] | None,
    parse_args: Callable[[list[str] | None], tuple[_Options, bool]],
    run: Callable[[_Options], dict[str, Any]],
    also: Callable[[dict[str, Any]], str] | None = None,
) -> int:
    """A benchmark's ``main``: parse, run, print the summary line (and
    ``also``'s line of the benchmark's own figures); 130 on Ctrl-C or SIGTERM."""
    opts, verbose = parse_args(argv)
    setup_logging(verbose)
    try:
        with terminate_on_sigterm():
            report = run(opts)
    except KeyboardInterrupt:
        print(f"{name}: interrupted; everything started was stopped", file=sys.stderr)
        return 130
    print(summary_line(name, report), flush=True)
    if also is not None:
        print(also(report), flush=True)
    return 0


def new_run() -> tuple[str, str]:
    """A fresh run id, and the ``owner_service`` that tags the run's own jobs."""
    run_id = secrets.token_hex(4)
    return run_id, f"bench-{run_id}"


@dataclass
class ClusterSpec:
    out: Path
    shards: int = 2
    workers: int = 2
    dsns: list[str] = field(default_factory=list)  # given: no PostgreSQL is started
    worker_env: dict[str, str] = field(default_factory=dict)  # VAKIT_* knobs
    pg_settings: dict[str, str] = field(default_factory=dict)
    keep_data: bool = False
    statement_stats: bool = False  # load pg_stat_statements and report the top statements
    profile_workers: bool = False  # py-spy every worker during the measured window
    # PostgreSQL's durable defaults (fsync, synchronous_commit and
    # full_page_writes on), as a deployment runs; False opts into the fast
    # settings that lose data on a machine crash (``--unsafe-fast-db``).
    durable: bool = True
    # ZooKeeper assigns each shard an owner and a leader, as in `vakit up`;
    # without it every worker claims from, and leads, every shard
    # (``--no-zookeeper``): two materializers then race on every cron.
    zookeeper: bool = True
    # A command the API processes run under, and how long they may take to
    # start: benchmarks.instructions runs the API under valgrind.
    api_prefix: tuple[str, ...] = ()
    api_start_seconds: float = 60.0
    # PostgreSQL servers started beside the shards but left out of
    # VAKIT_SHARDS and not migrated: databases a run adds to the running
    # cluster (benchmarks.reshard), in ``BenchCluster.spare_dsns``.
    spare_shards: int = 0


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]


def _http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            status: int = resp.status
            return 200 <= status < 300
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the response (and its socket) open
        return False
    except (urllib.error.URLError, OSError):
        return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class BenchCluster:
    """Shards and processes for one benchmark run; use as a context manager."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.log_dir = spec.out / "logs"
        self.dsns: list[str] = list(spec.dsns)
        self.spare_dsns: list[str] = []
        self.pg: list[PgServer] = []
        self.data_dir: Path | None = None
        self._procs: list[_Proc] = []
        self._profilers: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.metrics_ports: list[int] = []
        self.sink_url: str | None = None
        self.api_url: str | None = None
        self.api_urls: list[str] = []
        self.api_token: str | None = None
        self.zk: ZkServer | None = None
        self._zk_dir: Path | None = None
        self.broker: TansuBroker | None = None
        self._broker_dir: Path | None = None

    # -- lifecycle -------------------------------------------------------------

    def __enter__(self) -> BenchCluster:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start_shards(self) -> list[str]:
        """Start (or take the given) shards and bring their schema up to date."""
        started = time.monotonic()
        if not self.dsns:
            tmp = os.environ.get("VAKIT_BENCH_TMP")  # default: the system's temp dir
            base = Path(tempfile.mkdtemp(prefix="vakit-bench-pg-", dir=tmp))
            # PostgreSQL runs as 'postgres' and must traverse the directory.
            base.chmod(0o755)
            self.data_dir = base
            settings = dict(self.spec.pg_settings)
            if self.spec.statement_stats:
                settings.setdefault("shared_preload_libraries", "pg_stat_statements")
            self.pg = [
                PgServer(base / f"shard{i}", durable=self.spec.durable, extra_settings=settings)
                for i in range(self.spec.shards + self.spec.spare_shards)
            ]
            # initdb dominates a small run's setup: do the shards side by side.
            with ThreadPoolExecutor(max_workers=len(self.pg)) as pool:
                list(pool.map(lambda s: s.start(), self.pg))
            self.dsns = [s.dsn for s in self.pg[: self.spec.shards]]
            self.spare_dsns = [s.dsn for s in self.pg[self.spec.shards :]]
        for shard, dsn in enumerate(self.dsns):
            migrate_shard(dsn, shard)
            if self.spec.statement_stats:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(query("create_statement_stats"))
        log.info("%d shards ready in %.1f s", len(self.dsns), time.monotonic() - started)
        return self.dsns

    def stop_processes(self) -> None:
        """Stop the workers, API and sink (SIGTERM: a graceful stop, then
        SIGKILL after 30 s); the shards keep running."""
        started = time.monotonic()
        for proc in self._procs:
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self._procs:
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()
            proc.log.close()
        if self._procs:
            log.info("processes stopped in %.1f s", time.monotonic() - started)
        self._procs.clear()
        self.metrics_ports.clear()
        self.api_urls.clear()

    def stop(self) -> None:
        # Processes first (workers release what they hold), PostgreSQL last.
        self.stop_profilers()
        self.stop_processes()
        if self.zk is not None:
            self.zk.stop()
            self.zk = None
        if self.broker is not None:
            self.broker.kill()  # in-memory: nothing to keep, no drain to wait out
            self.broker = None
        if self._broker_dir is not None:
            shutil.rmtree(self._broker_dir, ignore_errors=True)
        if self._zk_dir is not None and not self.spec.keep_data:
            shutil.rmtree(self._zk_dir, ignore_errors=True)
        for server in self.pg:
            server.stop("fast")
        self.pg.clear()
        if self.data_dir is not None and not self.spec.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- processes ---------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
        env.update(
            VAKIT_SHARDS=",".join(self.dsns),
            VAKIT_ENABLE_NOOP_TARGET="true",
            VAKIT_ALLOW_PRIVATE_TARGETS="true",  # the sink listens on loopback
            # One owner loads a whole wave (a million jobs or crons, ~20,000
            # a second): the per-owner create rate and cron quota are off;
            # --env VAKIT_OWNER_CREATE_RATE=… measures them on.
            VAKIT_OWNER_CREATE_RATE="0",
            VAKIT_OWNER_MAX_CRONS="0",
        )
        if self.zk is not None:
            env["VAKIT_ZK"] = self.zk.connect_string + "/vakit"
        if self.broker is not None:
            env["VAKIT_KAFKA_BOOTSTRAP"] = self.broker.bootstrap
        env.update(self.spec.worker_env)
        return env

    def start_zookeeper(self) -> str:
        """A ZooKeeper server for shard ownership and leadership, as `vakit up`
        starts one; returns its connect string."""
        started = time.monotonic()
        tmp = os.environ.get("VAKIT_BENCH_TMP")
        self._zk_dir = Path(tempfile.mkdtemp(prefix="vakit-bench-zk-", dir=tmp))
        self.zk = ZkServer(self._zk_dir / "zk")
        self.zk.start()
        log.info("ZooKeeper ready in %.1f s", time.monotonic() - started)
        return str(self.zk.connect_string)

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str], prefix: tuple[str, ...] = ()
    ) -> _Proc:
        log_path = self.log_dir / f"{name}.log"
        log = open(log_path, "ab")  # closed in stop(), after the child exits
        popen = subprocess.Popen(
            [*prefix, sys.executable, *args],
            env=env,
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc = _Proc(name, popen, log_path, log)
        self._procs.append(proc)
        return proc

    def start_scheduler(self, target: str) -> tuple[list[str], dict[str, Any]]:
        """Shards, the jobs' target and the workers, in that order.

        ``target`` is ``noop``, ``http`` (a sink started here) or ``kafka``
        (a topic on a Tansu broker started here). Returns the shards' DSNs
        and the ``target`` object to give every job.
        """
        dsns = self.start_shards()
        if self.spec.zookeeper and self.zk is None:
            self.start_zookeeper()
        job_target: dict[str, Any] = {"kind": "NOOP"}
        if target == "http":
            job_target = {"kind": "HTTP", "url": self.start_sink()}
        elif target == "kafka":
            job_target = {"kind": "KAFKA", "topic": self.start_broker()}
        self.start_workers()
        return dsns, job_target

    def start_sink(self, record: Path | None = None) -> str:
        """A fast HTTP target in its own process (benchmarks.sink); with
        ``record``, it notes every firing in that file."""
        port = find_free_port()
        args = ["-m", "benchmarks.sink", "--port", str(port)]
        if record is not None:
            args += ["--record", str(record)]
        proc = self._spawn("sink", args, dict(os.environ))
        self.sink_url = f"http://127.0.0.1:{port}/fire"
        self._wait(lambda: _http_ok(f"http://127.0.0.1:{port}/count"), [proc], 30, "the sink")
        return self.sink_url

    def sink_stats(self) -> dict[str, Any]:
        """What the sink says of itself (``GET /stats``): firings answered
        and its answer latency."""
        assert self.sink_url is not None
        url = self.sink_url.rsplit("/", 1)[0] + "/stats"
        with urllib.request.urlopen(url, timeout=5) as resp:
            stats: dict[str, Any] = json.loads(resp.read())
        return stats

    def start_broker(self, topic: str = "vakit-wave", partitions: int = 4) -> str:
        """A Tansu broker (in-memory storage, as the tests run it) with
        ``topic``; the workers produce to it (``VAKIT_KAFKA_BOOTSTRAP``).
        Returns the topic."""
        started = time.monotonic()
        tmp = os.environ.get("VAKIT_BENCH_TMP")
        self._broker_dir = Path(tempfile.mkdtemp(prefix="vakit-bench-kafka-", dir=tmp))
        self.broker = TansuBroker(self._broker_dir / "tansu")
        self.broker.start()
        self.broker.create_topic(topic, partitions=partitions)
        log.info("Kafka broker (Tansu) ready in %.1f s", time.monotonic() - started)
        return topic

    def sink_count(self, flush: bool = False) -> int:
        """Firings the sink has answered; ``flush``: its record is written
        out first."""
        assert self.sink_url is not None
        url = self.sink_url.rsplit("/", 1)[0] + ("/flush" if flush else "/count")
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.read())

    def start_workers(self) -> None:
        started = time.monotonic()
        env = self.base_env()
        procs = []
        for i in range(self.spec.workers):
            port = find_free_port()
            self.metrics_ports.append(port)
            worker_env = {
                **env,
                "VAKIT_WORKER_ID": f"bench-worker-{i}",
                "VAKIT_METRICS_PORT": str(port),
            }
            procs.append(self._spawn(f"worker-{i}", ["-m", "cluster.cli", "worker"], worker_env))
        # /readyz turns 200 once every claim loop has polled its shard once.
        self._wait(
            lambda: all(_http_ok(f"http://127.0.0.1:{p}/readyz") for p in self.metrics_ports),
            procs,
            60,
            "the workers",
        )
        log.info("%d workers polling in %.1f s", len(procs), time.monotonic() - started)

    def start_api(self, owner: str) -> tuple[str, str]:
        """The API with one bearer token for ``owner``; returns (url, token)."""
        token = secrets.token_urlsafe(18)
        self.start_apis({token: owner})
        self.api_token = token
        return self.api_urls[0], token

    def start_apis(
        self, tokens: dict[str, str], count: int = 1, operators: dict[str, str] | None = None
    ) -> list[str]:
        """``count`` API processes that all accept ``tokens`` (token → owner)
        and ``operators`` (token → operator name); returns their base URLs. A
        client spreads its requests over them, as a load balancer in front of
        API replicas would."""
        started = time.monotonic()
        env = {
            **self.base_env(),
            "VAKIT_API_TOKENS": ",".join(f"{t}={o}" for t, o in tokens.items()),
        }
        if operators:
            env["VAKIT_OPERATOR_TOKENS"] = ",".join(f"{t}={o}" for t, o in operators.items())
        procs, urls = [], []
        for i in range(count):
            port = find_free_port()
            name = "api" if count == 1 else f"api-{i}"
            procs.append(
                self._spawn(
                    name,
                    ["-m", "cluster.cli", "api"],
                    {**env, "VAKIT_API_PORT": str(port)},
                    self.spec.api_prefix,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        # /readyz also needs a worker beat on every shard: start workers first.
        self._wait(
            lambda: all(_http_ok(f"{u}/readyz") for u in urls),
            procs,
            self.spec.api_start_seconds,
            "the API",
        )
        self.api_urls += urls
        self.api_url = self.api_urls[0]
        log.info("%d API process(es) ready in %.1f s", count, time.monotonic() - started)
        return urls

    def _wait(self, ready: Any, procs: list[_Proc], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for proc in procs:
                if proc.popen.poll() is not None:
                    raise RuntimeError(
                        f"{proc.name} exited with {proc.popen.returncode} while starting; "
                        f"log {proc.log_path}:\n{_tail(proc.log_path)}"
                    )
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {p.name}\n{_tail(p.log_path)}" for p in procs)
                raise TimeoutError(f"{what} not ready after {timeout:.0f} s\n{tails}")
            time.sleep(0.1)

    def pid_of(self, name: str) -> int:
        """The process id of the process started as ``name`` (``api``, ``worker-0``…)."""
        return next(p.popen.pid for p in self._procs if p.name == name)

    def check_alive(self) -> None:
        """Raise if a process we started has died (a crash mid-run)."""
        for proc in self._procs:
            if proc.popen.poll() is not None:
                raise RuntimeError(
                    f"{proc.name} exited with {proc.popen.returncode}; "
                    f"log {proc.log_path}:\n{_tail(proc.log_path)}"
                )

    def worker_counters(self) -> dict[str, float]:
        """Vakit counters summed over the workers (from their /metrics)."""
        totals: dict[str, float] = {}
        for port in self.metrics_ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
            for line in text.splitlines():
                if not line.startswith("vakit_") or "_total" not in line:
                    continue
                name = line.split("{", 1)[0].split(" ", 1)[0]
                totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return totals

    def finished_jobs(self) -> int:
        """Jobs the workers have written a final outcome for."""
        c = self.worker_counters()
        return int(c.get("vakit_jobs_succeeded_total", 0) + c.get("vakit_jobs_failed_total", 0))

    def wait_finished(
        self, expected: int, *, timeout: float, stall: float = 60.0, poll: float = 0.5
    ) -> int:
        """Wait until the workers have finished ``expected`` jobs; give up after
        ``timeout`` s, or once nothing has finished for ``stall`` s (a stuck
        run is reported, not waited on for ever). Returns the count seen."""
        deadline = time.monotonic() + timeout
        last, last_change = -1, time.monotonic()
        progress = Progress("jobs finished", expected)
        while True:
            self.check_alive()
            try:
                done = self.finished_jobs()
            except (TimeoutError, urllib.error.URLError):
                # A worker busy starting a huge instant answers late; the
                # stall rule still ends a run that makes no progress.
                done = max(last, 0)
            progress.update(done)
            now = time.monotonic()
            if done >= expected or now > deadline:
                progress.close()
                return done
            if done != last:
                last, last_change = done, now
            elif now - last_change > stall:
                progress.close()
                return done
            time.sleep(poll)

    # -- worker profile ------------------------------------------------------------

    def start_profilers(self) -> None:
        """Attach py-spy to every worker (CPU samples only: idle waits are not
        recorded, so sample counts are proportional to CPU time)."""
        if not self.spec.profile_workers:
            return
        pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        for proc in self._procs:
            if not proc.name.startswith("worker"):
                continue
            path = self.spec.out / f"profile-{proc.name}.txt"
            args = [pyspy, "record", "--pid", str(proc.popen.pid), "--format", "raw"]
            # --nonblocking: do not pause the worker for each sample.
            args += ["--function", "--nonblocking", "--rate", "100", "-o", str(path)]
            popen = subprocess.Popen(args, stdout=proc.log, stderr=proc.log, start_new_session=True)
            self._profilers.append((popen, path))

    def stop_profilers(self) -> list[Path]:
        """Stop py-spy (it writes its file on SIGINT); returns the files."""
        paths = []
        for popen, path in self._profilers:
            if popen.poll() is None:
                popen.send_signal(signal.SIGINT)
            try:
                popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
            if path.exists():
                paths.append(path)
        self._profilers.clear()
        return paths

    # -- SQL profile ---------------------------------------------------------------

    def checkpoint(self) -> float:
        """A CHECKPOINT on every shard, one after another; the seconds it took."""
        started = time.monotonic()
        for dsn in self.dsns:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(query("checkpoint"))
        return time.monotonic() - started

    def wal_stats(self) -> list[dict[str, int]]:
        """Per shard: WAL records, full-page images and bytes written so far,
        and checkpoints timed and requested (pg_stat_wal, pg_stat_bgwriter)."""
        stats = []
        for dsn in self.dsns:
            with psycopg.connect(dsn, autocommit=True) as conn:
                cur = conn.cursor(row_factory=dict_row)
                row = cur.execute(query("wal_stats")).fetchone()
            stats.append({k: int(v) for k, v in (row or {}).items()})
        return stats

    def reset_statement_stats(self) -> None:
        if not self.spec.statement_stats:
            return
        for dsn in self.dsns:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(query("reset_statement_stats"))

    def statement_stats(self, limit: int = 10) -> list[dict[str, Any]] | None:
        """The statements that used the most time on the shards (summed over
        shards) since the last reset; None unless ``statement_stats``."""
        if not self.spec.statement_stats:
            return None
        merged: dict[str, dict[str, Any]] = {}
        for dsn in self.dsns:
            with psycopg.connect(dsn, autocommit=True) as conn:
                cur = conn.cursor(row_factory=dict_row)
                for row in cur.execute(query("top_statements"), {"limit": limit * 2}):
                    text = " ".join(row["query"].split())[:160]
                    entry = merged.setdefault(text, {"query": text, **dict.fromkeys(_SUMMED, 0)})
                    for name in _SUMMED:
                        entry[name] += row[name]
        top = sorted(merged.values(), key=lambda e: e["total_ms"], reverse=True)[:limit]
        for entry in top:
            entry["total_ms"] = round(entry["total_ms"], 1)
            entry["mean_ms"] = (
                round(entry["total_ms"] / entry["calls"], 3) if entry["calls"] else None
            )
            entry["wal_bytes"] = int(entry["wal_bytes"])
        return top

    # -- processes to sample ---------------------------------------------------------

    def process_groups(self) -> dict[str, list[psutil.Process]]:
        groups: dict[str, list[psutil.Process]] = {"workers": [], "postgres": []}
        for proc in self._procs:
            role = proc.name.split("-", 1)[0]  # worker-0 → worker, api-1 → api
            role = "workers" if role == "worker" else role
            try:
                groups.setdefault(role, []).append(psutil.Process(proc.popen.pid))
            except psutil.NoSuchProcess:
                pass
        for server in self.pg:
            pid = server.pid()
            if pid is None:
                continue
            try:
                master = psutil.Process(pid)
                groups["postgres"] += [master, *master.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        broker = self.broker.pid if self.broker is not None else None
        if broker is not None:
            try:
                groups["broker"] = [psutil.Process(broker)]
            except psutil.NoSuchProcess:
                pass
        return groups

    @property
    def worker_pids(self) -> list[int]:
        return [p.popen.pid for p in self._procs if p.name.startswith("worker")]


@dataclass
class WindowUsage:
    """CPU used between :meth:`ProcessSampler.begin` and :meth:`ProcessSampler.end`."""

    seconds: float
    cpu_seconds: dict[str, float]
    machine_busy_fraction: float
    machine_busy_seconds: float
    # The postgres group's CPU by process kind (postgres_kind): what the
    # statements cost (backends) apart from what ran beside them.
    postgres_by_kind: dict[str, float] = field(default_factory=dict)
    # CPU the hypervisor gave to other guests while ours wanted it (steal).
    machine_steal_fraction: float = 0.0

    def as_dict(self, jobs: int | None = None) -> dict[str, Any]:
        """The window's figures; with ``jobs``, also CPU microseconds per job,
        which, unlike rates, a busy neighbour on a shared machine barely moves."""
        ours = sum(self.cpu_seconds.values())
        per_job = (
            {k: round(v / jobs * 1e6, 1) for k, v in self.cpu_seconds.items()} if jobs else None
        )
        return {
            "wall_seconds": round(self.seconds, 3),
            "cpu_seconds": {k: round(v, 2) for k, v in self.cpu_seconds.items()},
            "machine_busy_fraction": round(self.machine_busy_fraction, 3),
            "machine_steal_fraction": round(self.machine_steal_fraction, 3),
            # CPU used by processes this benchmark did not start: on a shared
            # machine, the noise in the figures.
            "other_cpu_seconds": round(max(0.0, self.machine_busy_seconds - ours), 2),
            "cpu_us_per_job": per_job,
            "postgres_cpu_seconds_by_kind": {k: round(v, 2) for k, v in self.postgres_by_kind.items()},
            "cores": os.cpu_count(),
        }


# PostgreSQL's process titles, by what they do; anything else of a server is
# a backend serving a client (or the postmaster, which is nearly idle).
_PG_KINDS = (
    ("autovacuum worker", "autovacuum"),
    ("autovacuum launcher", "autovacuum"),
    ("checkpointer", "checkpointer"),
    ("background writer", "bgwriter"),
    ("walwriter", "walwriter"),
)


def wal_window(
    before: list[dict[str, int]], after: list[dict[str, int]], jobs: int
) -> dict[str, Any]:
    """What the shards wrote to their WAL between two ``wal_stats()``:
    per shard, and per job all shards together. A wave that fills
    max_wal_size forces checkpoints in its middle (``checkpoints_req``), and
    every page first written after one costs a full-page image."""
    shards = [{k: a[k] - b.get(k, 0) for k in a} for b, a in zip(before, after, strict=True)]
    total = {k: sum(s[k] for s in shards) for k in (shards[0] if shards else {})}
    return {
        "per_shard": shards,
        "bytes_per_job": round(total["wal_bytes"] / jobs, 1) if jobs and total else None,
        "fpi_per_job": round(total["wal_fpi"] / jobs, 3) if jobs and total else None,
        "checkpoints_requested": total.get("checkpoints_req", 0),
        "checkpoints_timed": total.get("checkpoints_timed", 0),
    }


def postgres_kind(title: str) -> str:
    """What a PostgreSQL process is, from its title (``postgres:
    autovacuum worker vakit``): autovacuum, checkpointer, bgwriter,
    walwriter, or backends (clients' sessions, the postmaster and the rest).
    An autovacuum run during a wave is CPU the statements did not use."""
    for marker, kind in _PG_KINDS:
        if marker in title:
            return kind
    return "backends"


def _machine_total(times: Any) -> float:
    # Linux counts guest time inside user time already: leave it out.
    return float(sum(v for k, v in times._asdict().items() if not k.startswith("guest")))


def _machine_idle(times: Any) -> float:
    return float(times.idle + getattr(times, "iowait", 0.0))


@dataclass(frozen=True)
class UsageMark:
    """Where a CPU window began: wall clock, machine CPU times, and each
    process's CPU seconds by group."""

    monotonic: float
    machine: Any
    base: dict[str, dict[int, float]]


class ProcessSampler:
    """Samples, every ``interval`` s, the RSS of the workers and the CPU time
    of every process the cluster runs (PostgreSQL backends included).

    CPU for a window is the sum, per process, of the time used since the
    window began; a process born inside the window counts from zero, so new
    backends are included.
    """

    def __init__(self, cluster: BenchCluster, interval: float = 0.2) -> None:
        self.cluster = cluster
        self.interval = interval
        self.peak_process_rss = 0
        self.peak_sum_rss = 0
        self._cpu: dict[str, dict[int, float]] = {}
        self._pg_kind: dict[int, str] = {}  # postgres pid -> postgres_kind
        self._began: UsageMark | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self._me = psutil.Process()

    def __enter__(self) -> ProcessSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except Exception:  # a lost sample must not end the sampling (or the run)
                log.exception("sampling failed")

    def sample(self) -> None:
        groups = self.cluster.process_groups()
        groups["harness"] = [self._me]
        rss_sum = 0
        seen: dict[str, dict[int, float]] = {}
        for role, procs in groups.items():
            for proc in procs:
                try:
                    with proc.oneshot():
                        times = proc.cpu_times()
                        rss = proc.memory_info().rss if role == "workers" else 0
                    if role == "postgres" and proc.pid not in self._pg_kind:
                        self._pg_kind[proc.pid] = postgres_kind(" ".join(proc.cmdline()))
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                seen.setdefault(role, {})[proc.pid] = times.user + times.system
                rss_sum += rss
                self.peak_process_rss = max(self.peak_process_rss, rss)
        with self._lock:
            self.peak_sum_rss = max(self.peak_sum_rss, rss_sum)
            for role, cpu in seen.items():
                self._cpu.setdefault(role, {}).update(cpu)

    def mark(self) -> UsageMark:
        """The start of a CPU window; several windows may overlap (the
        creation of a wave, and the wave itself)."""
        self.sample()
        with self._lock:
            base = {role: dict(cpu) for role, cpu in self._cpu.items()}
        return UsageMark(time.monotonic(), psutil.cpu_times(), base)

    def usage_since(self, mark: UsageMark) -> WindowUsage:
        """CPU used by each process group since ``mark``."""
        self.sample()
        now_machine = psutil.cpu_times()
        total = _machine_total(now_machine) - _machine_total(mark.machine)
        idle = _machine_idle(now_machine) - _machine_idle(mark.machine)
        steal = getattr(now_machine, "steal", 0.0) - getattr(mark.machine, "steal", 0.0)
        with self._lock:
            used = {
                role: sum(t - mark.base.get(role, {}).get(pid, 0.0) for pid, t in cpu.items())
                for role, cpu in self._cpu.items()
            }
            by_kind: dict[str, float] = {}
            base = mark.base.get("postgres", {})
            for pid, t in self._cpu.get("postgres", {}).items():
                kind = self._pg_kind.get(pid, "backends")
                by_kind[kind] = by_kind.get(kind, 0.0) + t - base.get(pid, 0.0)
        return WindowUsage(
            seconds=time.monotonic() - mark.monotonic,
            cpu_seconds=used,
            machine_busy_fraction=1.0 - idle / total if total > 0 else 0.0,
            machine_busy_seconds=total - idle,
            postgres_by_kind=by_kind,
            machine_steal_fraction=steal / total if total > 0 else 0.0,
        )

    def begin(self) -> None:
        """Start the run's main CPU window (e.g. at the wave's T)."""
        self._began = self.mark()

    def end(self) -> WindowUsage:
        if self._began is None:
            raise RuntimeError("end() without begin()")
        return self.usage_since(self._began)

    def peak_rss(self) -> dict[str, int]:
        return {"max_process": self.peak_process_rss, "sum": self.peak_sum_rss}
