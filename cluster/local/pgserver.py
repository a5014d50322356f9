"""Local PostgreSQL servers for ``vakit up``, the tests and the benchmarks.

PostgreSQL refuses to run as root; when we are root the server runs as the
``postgres`` user (``runuser``), in a directory we hand over to it. A data
directory is reused across restarts: ``vakit up`` keeps its jobs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from cluster.local.childproc import find_free_port

__all__ = ["PgServer", "PgServerError", "pg_bin", "untraversable_parent"]

_DEFAULT_BIN = "/usr/lib/postgresql/15/bin"


def pg_bin(name: str) -> str:
    base = os.environ.get("VAKIT_PG_BIN", _DEFAULT_BIN)
    path = Path(base) / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(
        f"PostgreSQL binary {name!r} not found in {base} or on PATH; "
        "install postgresql-15 (make setup does) or set VAKIT_PG_BIN"
    )


def _as_postgres() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


class PgServerError(RuntimeError):
    """initdb or pg_ctl failed; the first line says why, with the fix when known."""


def untraversable_parent(path: Path) -> Path | None:
    """The first existing ancestor of ``path`` that the ``postgres`` user cannot
    enter (only when we run as root and hand the directory over to it)."""
    if os.geteuid() != 0:
        return None
    for parent in reversed(path.resolve().parents):
        if not parent.exists():
            break
        probe = subprocess.run([*_as_postgres(), "test", "-x", str(parent)], check=False)
        if probe.returncode != 0:
            return parent
    return None


class PgServer:
    """One PostgreSQL cluster in ``data_dir``, listening on loopback."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int | None = None,
        *,
        durable: bool = True,
        max_connections: int = 200,
        extra_settings: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port or find_free_port()
        self.durable = durable
        self.max_connections = max_connections
        self.extra_settings = extra_settings or {}
        self.log_file = self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def dsn(self) -> str:
        return self.dsn_for("postgres")

    def dsn_for(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*_as_postgres(), *args], check=check, capture_output=True, text=True, timeout=120
        )

    def init(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.data_dir, "postgres", "postgres")
        self.data_dir.chmod(0o700)
        result = self._run(
            pg_bin("initdb"),
            "-D", str(self.data_dir),
            "-U", "postgres",
            "--auth=trust",
            "-E", "UTF8",
            "--locale=C.UTF-8",
            "--no-instructions",
            check=False,
        )  # fmt: skip
        if result.returncode != 0:
            lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
            said = next((ln for ln in lines if "initdb:" in ln), lines[0] if lines else "failed")
            fix = ""
            blocked = untraversable_parent(self.data_dir)
            if blocked is not None:
                fix = (
                    f"; PostgreSQL runs as the postgres user, which cannot enter {blocked} "
                    f"(mode {blocked.stat().st_mode & 0o777:o}): choose a data directory under "
                    f"one it can (e.g. --data-dir /var/tmp/vakit) or `chmod o+x {blocked}`"
                )
            raise PgServerError(f"{said.strip()}{fix}")

    def _options(self) -> str:
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": "''",
            "max_connections": str(self.max_connections),
            "shared_buffers": "256MB",
            "log_min_messages": "warning",
        }
        if not self.durable:
            # Test and benchmark clusters: losing them on a machine crash is fine.
            settings.update(fsync="off", synchronous_commit="off", full_page_writes="off")
        settings.update(self.extra_settings)
        return " ".join(f"-c {k}={v}" for k, v in settings.items())

    def start(self, timeout: float = 60.0) -> None:
        self.init()
        if os.geteuid() == 0 and not self.log_file.exists():
            self.log_file.touch()
            shutil.chown(self.log_file, "postgres", "postgres")
        result = self._run(
            pg_bin("pg_ctl"),
            "-D", str(self.data_dir),
            "-l", str(self.log_file),
            "-o", self._options(),
            "-w", "-t", str(int(timeout)),
            "start",
            check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise PgServerError(
                f"PostgreSQL in {self.data_dir} did not start on port {self.port}: "
                f"{result.stderr.strip()}\n--- log tail ---\n{self.log_tail()}"
            )

    def stop(self, mode: str = "fast") -> None:
        if not (self.data_dir / "postmaster.pid").exists():
            return
        self._run(pg_bin("pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "stop", check=False)

    def pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster (a crash); its children exit on their own."""
        pid = self.pid()
        if pid:
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def create_database(self, name: str, template: str | None = None) -> str:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if template:
                query = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            conn.execute(query)
        return self.dsn_for(name)

    def __enter__(self) -> PgServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
