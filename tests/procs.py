"""Real Vakit processes for the fault tests, and a target that can stall them.

:class:`ProcessHarness` starts ``python -m cluster.cli worker`` and ``… api``
as separate OS processes, configured only through ``VAKIT_…`` variables, each
logging to its own file. A test can then kill (SIGKILL), pause (SIGSTOP),
resume (SIGCONT) or stop (SIGTERM) any of them by pid and scrape its
``/metrics``. :func:`running_processes` kills whatever is still alive at the
end, so a failing test leaks no process.

:class:`FaultSink` is an HTTP target on loopback that logs every firing and
answers according to knobs in the job's payload. Beside the knobs of
``tests.helpers.Sink`` it has ``sleep_first``: sleep only on attempt 1, so a
job can hang while one worker holds it and finish at once when another one
retries it. Its sleeps end early when the sink closes, and it serves from an
event loop of its own, so thousands of firings do not need thousands of
threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from cluster.local.childproc import find_free_port
from cluster.local.pgserver import PgServer

__all__ = [
    "FAULT_SETTINGS",
    "OWNER",
    "TOKEN",
    "FaultSink",
    "ProcessHarness",
    "SinkFiring",
    "VakitProcess",
    "processes_on_fresh_shards",
    "running_processes",
]

REPO = Path(__file__).resolve().parent.parent
TOKEN = "fault-token"
OWNER = "svc"

# Short leases and fast loops, so a lost worker's jobs come back within
# seconds. The lease (3 s + 1 s grace) is shorter than the tests' job
# timeouts on purpose: long jobs stay held by heartbeats (every lease / 3).
FAULT_SETTINGS: dict[str, str] = {
    "allow_private_targets": "true",  # the sink listens on 127.0.0.1
    # An operator's token: the tests read /api/v1/cluster and the API's
    # /metrics with it, and it acts as OWNER for jobs.
    "operator_tokens": f"{TOKEN}={OWNER}",
    "lease_seconds": "3",
    "lease_grace_seconds": "1",
    "reaper_interval": "0.5",
    "poll_interval": "0.2",
    "connect_timeout": "2",
    "stop_grace_seconds": "5",
    "backoff_base": "0.5",
    "backoff_max": "2",
}

Role = Literal["worker", "api"]


# -- the target ------------------------------------------------------------------


@dataclass
class SinkFiring:
    job_id: str
    attempt: int
    scheduled_for: str
    idempotency_key: str
    payload: Any
    received_at: float
    answered_at: float | None = None  # set when the answer is about to be sent
    status: int | None = None


class FaultSink:
    """An HTTP target that logs every firing; knobs in the job's payload:

    ``{"sleep": s}`` answers every attempt after ``s`` seconds;
    ``{"sleep_first": s}`` answers attempt 1 after ``s`` seconds, later ones at once;
    ``{"fail": n}`` answers 503 to the first ``n`` attempts;
    ``{"status": code}`` always answers ``code``.
    """

    def __init__(self) -> None:
        self.firings: list[SinkFiring] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="fault-sink", daemon=True
        )
        self.port = 0

    # -- lifecycle --

    def start(self) -> FaultSink:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)
        return self

    async def _serve(self) -> None:
        app = web.Application(client_max_size=1024 * 1024)
        app.router.add_post("/fire", self._fire)
        # A short shutdown timeout: a handler still sleeping for a killed
        # worker must not hold up the test's teardown.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _shutdown(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> FaultSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- serving --

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), timeout=seconds)

    async def _fire(self, request: web.Request) -> web.Response:
        body = await request.json()
        payload = body.get("payload") or {}
        attempt = int(body["attempt"])
        firing = SinkFiring(
            job_id=body["jobId"],
            attempt=attempt,
            scheduled_for=body["scheduledFor"],
            idempotency_key=request.headers.get("Idempotency-Key", ""),
            payload=payload,
            received_at=time.monotonic(),
        )
        with self._lock:
            self.firings.append(firing)
        status = 200
        if isinstance(payload, dict):
            delay = float(payload.get("sleep", 0))
            if attempt == 1:
                delay += float(payload.get("sleep_first", 0))
            if delay > 0:
                await self._pause(delay)
            if attempt <= int(payload.get("fail", 0)):
                status = 503
            status = int(payload.get("status", status))
        if self._closing.is_set():
            status = 503
        firing.status = status
        firing.answered_at = time.monotonic()
        return web.Response(status=status)

    # -- what it saw --

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/fire"

    def snapshot(self) -> list[SinkFiring]:
        with self._lock:
            return list(self.firings)

    def by_job(self) -> dict[str, list[SinkFiring]]:
        out: dict[str, list[SinkFiring]] = {}
        for f in self.snapshot():
            out.setdefault(f.job_id, []).append(f)
        return out

    def job_ids(self, attempt: int | None = None) -> set[str]:
        return {f.job_id for f in self.snapshot() if attempt is None or f.attempt == attempt}

    def count(self) -> int:
        with self._lock:
            return len(self.firings)


# -- the processes -----------------------------------------------------------------


@dataclass
class VakitProcess:
    """One ``vakit worker`` or ``vakit api`` process, by pid."""

    name: str
    role: Role
    env: dict[str, str]
    port: int  # the worker's metrics port, or the API port
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    stopped: bool = False  # SIGSTOPped and not yet continued

    def start(self) -> VakitProcess:
        assert self.proc is None, f"{self.name} was started already"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cluster.cli", self.role],
                cwd=REPO,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C is the harness's to pass on
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} is not started"
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _get(self, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
        try:
            request = urllib.request.Request(
                self.base_url + path, headers={"Authorization": f"Bearer {TOKEN}"}
            )
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def wait_ready(self, timeout: float = 30.0) -> VakitProcess:
        """A worker is ready once it polled every shard (``/readyz`` 200); the
        API once it serves (``/healthz``)."""
        path = "/readyz" if self.role == "worker" else "/healthz"
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if not self.alive():
                raise AssertionError(
                    f"{self.name} exited with {self.returncode} before it was ready\n{self.log_tail()}"
                )
            try:
                status, _ = self._get(path, timeout=1.0)
                if status == 200:
                    return self
                last = status
            except OSError as exc:
                last = exc
            time.sleep(0.1)
        raise AssertionError(
            f"{self.name} not ready after {timeout:.0f} s ({last})\n{self.log_tail()}"
        )

    # -- signals (always to this pid, never by name) --

    def send(self, sig: signal.Signals) -> None:
        assert self.alive(), f"{self.name} is not running"
        os.kill(self.pid, sig)

    def sigkill(self) -> None:
        self.send(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(timeout=10)
        self.stopped = False

    def sigstop(self) -> None:
        self.send(signal.SIGSTOP)
        self.stopped = True

    def sigcont(self) -> None:
        self.send(signal.SIGCONT)
        self.stopped = False

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (a graceful stop) and wait; returns the exit code."""
        if self.stopped:
            self.sigcont()
        self.send(signal.SIGTERM)
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} did not exit within {timeout:.0f} s of SIGTERM\n{self.log_tail()}"
            ) from None

    def kill_quietly(self) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    # -- metrics and logs --

    def scrape(self) -> list[tuple[str, dict[str, str], float]]:
        """Every sample of ``/metrics``: (name, labels, value)."""
        path = "/metrics"
        status, body = self._get(path, timeout=5.0)
        assert status == 200, f"{self.name} {path} answered {status}"
        return [
            (s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples
        ]

    def metric(self, name: str, **labels: str) -> float:
        """The sum of sample ``name`` (e.g. ``vakit_fenced_writes_total``) over
        the series whose labels match ``labels``; 0 when it has none yet."""
        return sum(
            value
            for sample, have, value in self.scrape()
            if sample == name and all(have.get(k) == v for k, v in labels.items())
        )

    def metric_by(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for sample, have, value in self.scrape():
            if sample == name:
                out[have.get(label, "")] = out.get(have.get(label, ""), 0.0) + value
        return out

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        text = "\n".join(self.log_text().splitlines()[-lines:])
        return f"--- {self.name} ({self.role}, log {self.log_path}) ---\n{text}"


@dataclass
class ProcessHarness:
    """Starts Vakit processes against ``shards``; :meth:`close` kills the rest."""

    shards: list[str]
    log_dir: Path
    settings: dict[str, str] = field(default_factory=lambda: dict(FAULT_SETTINGS))
    processes: list[VakitProcess] = field(default_factory=list)

    def env(self, **settings: object) -> dict[str, str]:
        # The outer environment's VAKIT_… variables must not leak into a test.
        env = {k: v for k, v in os.environ.items() if not k.startswith("VAKIT_")}
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        merged: dict[str, object] = {**self.settings, **settings}
        # A DSN with several hosts (a replicated shard) has commas: a JSON list.
        multi = any("," in dsn for dsn in self.shards)
        merged["shards"] = json.dumps(self.shards) if multi else ",".join(self.shards)
        for key, value in merged.items():
            if value is not None:
                env[f"VAKIT_{key.upper()}"] = (
                    str(value).lower() if isinstance(value, bool) else str(value)
                )
        return env

    def _add(self, name: str, role: Role, port: int, settings: dict[str, object]) -> VakitProcess:
        if any(p.name == name for p in self.processes):
            raise ValueError(f"a process named {name!r} exists already")
        proc = VakitProcess(name, role, self.env(**settings), port, self.log_dir / f"{name}.log")
        self.processes.append(proc)
        return proc

    def worker(self, name: str, *, start: bool = True, **settings: object) -> VakitProcess:
        """A worker with id ``name`` (its ``locked_by`` and attempt-log name)."""
        port = find_free_port()
        proc = self._add(
            name, "worker", port, {"worker_id": name, "metrics_port": port, **settings}
        )
        return proc.start() if start else proc

    def api(self, name: str = "api", *, start: bool = True, **settings: object) -> VakitProcess:
        port = find_free_port()
        proc = self._add(name, "api", port, {"api_port": port, **settings})
        return proc.start() if start else proc

    def close(self) -> None:
        for proc in self.processes:
            proc.kill_quietly()

    def log_report(self, lines: int = 60) -> str:
        return "\n\n".join(p.log_tail(lines) for p in self.processes if p.proc is not None)


@contextlib.contextmanager
def running_processes(shards: list[str], log_dir: Path) -> Iterator[ProcessHarness]:
    harness = ProcessHarness(shards, log_dir)
    try:
        yield harness
    finally:
        harness.close()


@contextlib.contextmanager
def processes_on_fresh_shards(
    servers: list[PgServer], log_dir: Path, **settings: str
) -> Iterator[ProcessHarness]:
    """A harness on shard databases cloned for it (the migrated template),
    with ``settings`` over the fault settings; the databases are dropped
    when it closes. A test module's processes share it."""
    from tests.pgfixtures import clone_databases, drop_databases

    dsns = clone_databases(servers)
    harness = ProcessHarness(dsns, log_dir)
    harness.settings.update(settings)
    try:
        yield harness
    finally:
        harness.close()
        drop_databases(dsns)
