"""Servers we run as child processes on loopback: what ZooKeeper and Tansu share.

:class:`ChildProcess` is the lifecycle of one such server (``ZkServer``,
``TansuBroker``): it starts the process in its own process group with stdout
and stderr appended to a log file, retries on another port when a port chosen
here was taken meanwhile, stops it with SIGTERM (then SIGKILL after a
timeout), kills, pauses and resumes it, and reads the end of its log for error
messages. Subclasses say how to launch the process and how to tell that it
serves.

Every process started here is killed on interpreter exit if the caller forgot
to stop it; a SIGKILL of the caller itself still leaks it.

:class:`StartStopContext` is the ``with`` protocol alone (start on entry, stop
on exit), for things that start and stop but are not one process, such as an
ensemble of servers or a test proxy.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import os
import signal
import socket
import subprocess
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, ClassVar, NoReturn, Self

__all__ = [
    "LOOPBACK",
    "ChildProcess",
    "StartStopContext",
    "find_free_port",
    "free_ports",
]

LOOPBACK = "127.0.0.1"


def find_free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on right now (another process may still take it)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct TCP ports nobody listens on right now."""
    # Hold every socket open until all are chosen, or the kernel may hand out
    # the same ephemeral port twice.
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class StartStopContext(abc.ABC):
    """``with thing:`` starts it and stops it again, however the block ends."""

    @abc.abstractmethod
    def start(self) -> object: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# Weak, so that a process object the caller dropped (after stopping it) does
# not stay alive only to be listed here.
_live: weakref.WeakSet[ChildProcess] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for child in list(_live):
        with contextlib.suppress(Exception):
            child.kill()


class ChildProcess(StartStopContext):
    """One server process on a loopback port, in its own process group.

    A subclass sets the class attributes and implements :meth:`launch` (which
    calls :meth:`_spawn` under ``self._lock``) and :meth:`wait_serving`. The
    port is kept across ``stop()``/``start()``, so a restart looks to clients
    like the same server coming back.
    """

    #: The file under ``data_dir`` that receives the process's stdout and stderr.
    log_name: ClassVar[str]
    #: Who the process is, in error messages ("ZooKeeper on port 2181 ...").
    label: ClassVar[str]
    #: What :meth:`start` and :meth:`wait_serving` raise; carries the log tail.
    error: ClassVar[type[Exception]] = RuntimeError
    #: What the log says when the process could not bind its port.
    port_in_use: ClassVar[str]

    def __init__(self, data_dir: str | os.PathLike[str], *, port: int | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self._port_given = port is not None
        self.port = port if port is not None else find_free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._lock = threading.RLock()

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def log_path(self) -> Path:
        return self.data_dir / self.log_name

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        """Is the process alive (it may be paused)?"""
        return self._proc is not None and self._proc.poll() is None

    # -- starting ---------------------------------------------------------

    @abc.abstractmethod
    def launch(self) -> None:
        """Start the process without waiting for it to serve (see :meth:`wait_serving`)."""

    @abc.abstractmethod
    def wait_serving(self, timeout: float = 30.0) -> None:
        """Wait until the process serves; raise :attr:`error` if it exits or times out."""

    def start(self, timeout: float = 30.0) -> None:
        """Start the process and wait until it serves (see :meth:`wait_serving`)."""
        for attempt in range(3):
            self.launch()
            try:
                self.wait_serving(timeout)
                return
            except self.error:
                # A port picked by find_free_port() can be taken by someone else
                # before the process binds it (it then exits); pick another,
                # unless the caller chose the port.
                if self._port_given or attempt == 2 or self.port_in_use not in self.log_tail():
                    raise
                self.kill()
                self.port = find_free_port()

    def _spawn(self, command: Sequence[str], env: dict[str, str] | None = None) -> None:
        """Run ``command`` in ``data_dir``, output to the log. Call with ``_lock`` held."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._close_log()
        self._log = open(self.log_path, "ab")  # closed in stop()/kill()
        self._proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
            env=env,
            # Own process group: a Ctrl-C aimed at the caller's terminal group
            # does not reach it, and stop()/kill() reach all of it.
            start_new_session=True,
        )
        _live.add(self)

    def _check_alive(self) -> None:
        """Raise :attr:`error`, with the log tail, if the process has exited."""
        proc = self._proc
        if proc is None:
            raise self.error(f"{self.label} was never started")
        code = proc.poll()
        if code is not None:
            self._finish()
            raise self.error(
                f"{self.label} on port {self.port} exited with status {code} while starting; "
                f"log {self.log_path}:\n{self.log_tail()}"
            )

    def _give_up(self, why: str) -> NoReturn:
        """Kill the process and raise :attr:`error` saying ``why``, with the log tail."""
        self.kill()
        raise self.error(
            f"{self.label} on port {self.port} {why}; log {self.log_path}:\n{self.log_tail()}"
        )

    # -- stopping and faults ----------------------------------------------

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds. Idempotent."""
        with self._lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                self._signal(signal.SIGTERM)
                # A paused process would hold the SIGTERM until continued.
                self._signal(signal.SIGCONT)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self._signal(signal.SIGKILL)
                    proc.wait()
            self._finish()

    def kill(self) -> None:
        """SIGKILL: the process dies without closing sessions or connections cleanly."""
        with self._lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                self._signal(signal.SIGKILL)
                proc.wait()
            self._finish()

    def pause(self) -> None:
        """SIGSTOP: sockets stay open, nothing answers (a hung server)."""
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
        _live.discard(self)
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

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(port={self.port}, "
            f"data_dir={str(self.data_dir)!r}, pid={self.pid})"
        )
