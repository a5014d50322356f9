"""Vakit's ZooKeeper layout: node paths and member records, shared by the
coordinator and the read-only cluster view.

Layout under ``root`` (itself inside the connect string's chroot, if any)::

    {root}/members/{member_id}                 ephemeral; JSON {id, host, pid, version, startedAt}
    {root}/shards/{i}/leader/{tag}__lock__{n}  ephemeral sequential; data = the member id
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from datetime import datetime

from kazoo.client import KazooClient

from cluster.clock import utc
from cluster.coordination.base import Member

__all__ = [
    "CONTENDER_RE",
    "LOCK_MARK",
    "ensure_chroot",
    "leader_path",
    "member_from_json",
    "member_to_json",
    "normalize_root",
    "sequence",
]

LOCK_MARK = "__lock__"
CONTENDER_RE = re.compile(r"__lock__(-?\d{10})$")


def member_to_json(member: Member) -> bytes:
    started = utc(member.started_at).isoformat().replace("+00:00", "Z")
    record = {
        "id": member.id,
        "host": member.host,
        "pid": member.pid,
        "version": member.version,
        "startedAt": started,
    }
    return json.dumps(record, separators=(",", ":")).encode()


def member_from_json(data: bytes) -> Member:
    record = json.loads(data)
    return Member(
        id=str(record["id"]),
        host=str(record["host"]),
        pid=int(record["pid"]),
        version=str(record["version"]),
        started_at=utc(datetime.fromisoformat(record["startedAt"])),
    )


def normalize_root(root: str) -> str:
    if not root.startswith("/"):
        raise ValueError(f"root must be an absolute ZooKeeper path, got {root!r}")
    return root.rstrip("/")


def ensure_chroot(connect: str, timeout: float = 10.0) -> None:
    """Create the chroot a connect string names (``host:port/chroot``), if any.

    kazoo needs the chroot to exist: every path under a missing one fails, and
    ``KazooClient.start()`` warns. A fresh ZooKeeper (``vakit up``) has none yet.
    """
    hosts, _, chroot = connect.partition("/")
    if not chroot.strip("/"):
        return
    client = KazooClient(hosts=hosts, timeout=timeout)
    deadline = time.monotonic() + timeout
    try:
        client.start(timeout=timeout)
        # Bounded: a blocking call would wait out a dropped connection forever.
        client.ensure_path_async("/" + chroot.strip("/")).get(
            timeout=max(0.1, deadline - time.monotonic())
        )
    finally:
        with contextlib.suppress(Exception):
            client.stop()
        with contextlib.suppress(Exception):
            client.close()


def sequence(node: str) -> int:
    match = CONTENDER_RE.search(node)
    return int(match.group(1)) if match else 2**63


def leader_path(root: str, shard: int) -> str:
    return f"{root}/shards/{shard}/leader"
