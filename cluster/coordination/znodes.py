"""Vakit's ZooKeeper layout: node paths, member records and the member node's
writes, shared by the coordinator and the read-only cluster view.

Layout under ``root`` (itself inside the connect string's chroot, if any)::

    {root}/members/{member_id}                 ephemeral; JSON {id, host, pid, version, startedAt}
    {root}/shards/{i}/leader/{tag}__lock__{n}  ephemeral sequential; data = the member id
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.interfaces import IAsyncResult
from kazoo.retry import ForceRetryError, KazooRetry

from cluster.coordination.base import Member
from cluster.instants import format_instant, parse_instant, utc

__all__ = [
    "CONTENDER_RE",
    "LOCK_MARK",
    "close_client",
    "compare_and_set",
    "ensure_chroot",
    "leader_path",
    "member_from_json",
    "member_to_json",
    "normalize_root",
    "register_member",
    "sequence",
    "unregister_member",
    "wait_by",
]

log = logging.getLogger(__name__)

LOCK_MARK = "__lock__"
CONTENDER_RE = re.compile(r"__lock__(-?\d{10})$")


def member_to_json(member: Member) -> bytes:
    started = format_instant(member.started_at)
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
        started_at=utc(parse_instant(record["startedAt"], "startedAt")),
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
        close_client(client)


def close_client(client: KazooClient) -> None:
    """End the client's session and free its threads. Never raises: shutdown paths call it."""
    try:
        client.stop()
    except Exception as exc:
        log.info("error while closing a ZooKeeper session: %r", exc)
    with contextlib.suppress(Exception):
        client.close()


def sequence(node: str) -> int:
    match = CONTENDER_RE.search(node)
    return int(match.group(1)) if match else 2**63


def leader_path(root: str, shard: int) -> str:
    return f"{root}/shards/{shard}/leader"


def wait_by(result: IAsyncResult, deadline: float) -> Any:
    """The value of a kazoo async call, waiting no later than ``deadline`` (monotonic).

    Any: kazoo is untyped, and the value's type depends on the call.
    """
    return result.get(timeout=max(0.0, deadline - time.monotonic()))


def register_member(
    client: KazooClient, retry: KazooRetry, path: str, member: Member, session: int
) -> None:
    """Make ``path`` our ephemeral member node in ``session``; safe to run under ``retry``.

    A node there held by another session is our previous process (crashed, its
    session not yet expired) or a duplicate id. The id is ours, so the node is
    replaced rather than waited out for a whole session timeout.
    """
    data = member_to_json(member)

    def attempt() -> None:
        try:
            client.create(path, data, ephemeral=True, makepath=True)
            return
        except NodeExistsError:
            pass
        try:
            _, stat = client.get(path)
        except NoNodeError as exc:
            raise ForceRetryError() from exc
        if stat.ephemeralOwner == session:
            return  # an earlier attempt whose reply was lost
        log.warning("member node %s held by session 0x%x; replacing it", path, stat.ephemeralOwner)
        with contextlib.suppress(NoNodeError):
            client.delete(path, version=stat.version)
        raise ForceRetryError()

    retry(attempt)


def unregister_member(client: KazooClient, path: str, session: int, deadline: float) -> None:
    """Delete the member node at ``path`` if ``session`` holds it; give up at ``deadline``.

    Async calls with a deadline, not kazoo's blocking ones, which would wait out
    a dropped connection; a node left behind goes with its session.
    """
    with contextlib.suppress(NoNodeError):
        _, stat = wait_by(client.get_async(path), deadline)
        if stat.ephemeralOwner == session:
            wait_by(client.delete_async(path, version=stat.version), deadline)


def compare_and_set(
    client: KazooClient, path: str, change: Callable[[bytes | None], bytes | None]
) -> None:
    """Rewrite ``path`` by compare-and-set: ``change`` gets the stored data
    (None: no node) and returns the new data, or None to write nothing (it
    may raise to refuse). A write that lost a race, to another writer or to
    our own earlier try whose answer was lost, reads and decides again."""
    while True:
        try:
            data, stat = client.get(path)
            version = stat.version
        except NoNodeError:
            data, version = None, -1
        new = change(data)
        if new is None:
            return
        try:
            if version < 0:
                client.create(path, new, makepath=True)
            else:
                client.set(path, new, version=version)
            return
        except (BadVersionError, NodeExistsError):
            continue
