"""A shard that survives its primary, locally: a primary with one synchronous
streaming standby, and the promotion of that standby.

What Patroni does in production (ops/patroni), at the size of ``vakit up
--replicas 1`` and the fault tests: the standby is a ``pg_basebackup`` of
the primary (run as the ``postgres`` user, like the servers), streaming with
its ``application_name``; the primary names it in
``synchronous_standby_names`` with ``synchronous_commit=on``, so a commit is
acknowledged only once the standby has it. A create that got a 2xx, and
every claim's attempt (the fencing token), survive the loss of the primary.

A shard's DSN then lists both servers in libpq's multi-host form with
``target_session_attrs=read-write``: a process connects to whichever is the
primary, and after a promotion its pools find the new one by themselves.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from cluster.local.pgserver import PgServer, PgServerError, _as_postgres, pg_bin

__all__ = [
    "ReplicatedShard",
    "forget_standbys",
    "multi_host_dsn",
    "promote",
    "start_standby",
    "sync_primary_settings",
]

STANDBY_NAME = "vakit_standby"


def sync_primary_settings() -> dict[str, str]:
    """A primary's settings for a synchronous standby. The standby's name
    is set by :func:`start_standby` once it streams (``ALTER SYSTEM``): set
    before, every commit (the migrations') would wait for a standby that
    cannot exist yet."""
    return {"synchronous_commit": "on", "wal_level": "replica", "max_wal_senders": "4"}


def multi_host_dsn(servers: list[PgServer], dbname: str) -> str:
    """libpq's multi-host form: the first of ``servers`` that takes writes."""
    hosts = ",".join("127.0.0.1" for _ in servers)
    ports = ",".join(str(s.port) for s in servers)
    return (
        f"host={hosts} port={ports} user=postgres dbname={dbname} target_session_attrs=read-write"
    )


def start_standby(
    primary: PgServer,
    data_dir: Path,
    port: int | None = None,
    *,
    durable: bool = True,
    extra_settings: dict[str, str] | None = None,
) -> PgServer:
    """A streaming standby of ``primary`` in ``data_dir`` (made afresh by
    ``pg_basebackup``: a standby left from before a promotion has diverged),
    started, and connected to the primary before this returns."""
    if data_dir.exists():
        shutil.rmtree(data_dir)
    standby = PgServer(data_dir, port, durable=durable, extra_settings=extra_settings)
    data_dir.mkdir(parents=True)
    if os.geteuid() == 0:  # pg_basebackup runs as postgres, into its own directory
        shutil.chown(data_dir, "postgres", "postgres")
    data_dir.chmod(0o700)
    command = [
        *_as_postgres(),
        pg_bin("pg_basebackup"),
        "-h", "127.0.0.1",
        "-p", str(primary.port),
        "-U", "postgres",
        "-D", str(data_dir),
        "-X", "stream",
        "-R",  # standby.signal and primary_conninfo
        "-c", "fast",
        "-d", f"host=127.0.0.1 port={primary.port} application_name={STANDBY_NAME}",
    ]  # fmt: skip
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise PgServerError(f"pg_basebackup of port {primary.port} failed: {result.stderr.strip()}")
    standby.start()
    _make_synchronous(primary)
    return standby


def _name_standby(server: PgServer, name: str) -> None:
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        if name:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
        else:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
        conn.execute("SELECT pg_reload_conf()")


def forget_standbys(server: PgServer) -> None:
    """Commit without waiting for any standby: a server alone (just
    promoted, or restarted before its standby is rebuilt) would otherwise
    wait forever on each commit for one named in its configuration."""
    _name_standby(server, "")


def _make_synchronous(primary: PgServer, timeout: float = 30.0) -> None:
    """Name the standby in the primary's ``synchronous_standby_names``;
    returns once the primary sees it streaming as synchronous."""
    import psycopg

    _name_standby(primary, STANDBY_NAME)
    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(primary.dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_replication"
                " WHERE application_name = %s AND sync_state = 'sync'",
                (STANDBY_NAME,),
            ).fetchone()
        if row and row[0]:
            return
        if time.monotonic() > deadline:
            raise PgServerError(f"the standby of port {primary.port} is not streaming")
        time.sleep(0.1)


def promote(server: PgServer, timeout: float = 60.0) -> float:
    """Promote the standby ``server`` to primary; the seconds it took."""
    started = time.monotonic()
    command = [
        *_as_postgres(), pg_bin("pg_ctl"), "-D", str(server.data_dir),
        "-w", "-t", str(int(timeout)), "promote",
    ]  # fmt: skip
    result = subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=timeout + 5
    )
    if result.returncode != 0:
        raise PgServerError(f"promotion of {server.data_dir} failed: {result.stderr.strip()}")
    return time.monotonic() - started


@dataclass
class ReplicatedShard:
    """One shard's servers: ``servers[0]`` the primary, the rest standbys."""

    servers: list[PgServer]

    @property
    def primary(self) -> PgServer:
        return self.servers[0]

    def dsn(self, dbname: str) -> str:
        return multi_host_dsn(self.servers, dbname)

    def primary_lost(self) -> bool:
        """The primary's postmaster is gone (crashed, killed, its machine lost)."""
        pid = self.primary.pid()
        return pid is None or not Path(f"/proc/{pid}").exists()

    def fail_over(self) -> float:
        """Promote the first standby; it becomes ``servers[0]``, the lost
        primary goes last (it has to be rebuilt as a standby before it is
        one again). The seconds the promotion took."""
        if len(self.servers) < 2:
            raise PgServerError("no standby to promote")
        took = promote(self.servers[1])
        self.servers = [self.servers[1], *self.servers[2:], self.servers[0]]
        forget_standbys(self.servers[0])  # it has none until one is rebuilt
        return took
