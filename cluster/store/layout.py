"""The shard list is routing data: every process must use the same one.

An id routes to ``slot % N``, so a process started with another list (another
count, another order, one database listed twice) would read and write the wrong
shards without a single error. Each shard therefore records its place once,
in ``cluster_layout``: its own random ``shard_uuid``, its index, the count and
the layout's fingerprint (a hash of every shard's uuid, in order).

:func:`check_layout` runs when ``vakit api`` and ``vakit worker`` start (and in
``vakit config check``): the first process on a fresh cluster registers the
layout; every later one compares its list with what the shards recorded and
refuses to run on a difference. The uuid, not the DSN, identifies a shard, so
two processes may reach one database under different host names.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from cluster.store.dsn import mask_dsn
from cluster.store.sql import QUERIES

__all__ = [
    "LayoutError",
    "ShardPlace",
    "check_layout",
    "fingerprint_of",
    "grow_layout",
    "read_layout",
]

log = logging.getLogger(__name__)


class LayoutError(RuntimeError):
    """This process's shard list differs from the cluster's; the message says how
    and what to do (one line)."""


@dataclass(frozen=True)
class ShardPlace:
    """What shard ``position`` of this process's list answered."""

    position: int
    dsn: str
    reachable: bool
    error: str | None = None
    migrated: bool = True
    schema_version: int | None = None
    shard_uuid: str | None = None
    shard_index: int | None = None
    shard_count: int | None = None
    fingerprint: str | None = None


def fingerprint_of(shard_uuids: Sequence[str]) -> str:
    text = f"{len(shard_uuids)}:" + ",".join(shard_uuids)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _read_one(position: int, dsn: str, timeout: float) -> ShardPlace:
    try:
        with psycopg.connect(dsn, connect_timeout=max(1, int(timeout)), autocommit=True) as conn:
            version_row = conn.execute(QUERIES["schema_version"], {}).fetchone()
            version = int(version_row[0]) if version_row else 0
            if conn.execute("SELECT to_regclass('cluster_layout')").fetchone() == (None,):
                return ShardPlace(
                    position, dsn, reachable=True, migrated=False, schema_version=version
                )
            row = conn.execute(QUERIES["layout_read"]).fetchone()
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ShardPlace(position, dsn, reachable=False, error=first)
    if row is None:
        return ShardPlace(position, dsn, reachable=True, schema_version=version)
    return ShardPlace(
        position, dsn, reachable=True, schema_version=version, shard_uuid=row[0], shard_index=row[1],
        shard_count=row[2], fingerprint=row[3],
    )  # fmt: skip


def read_layout(dsns: Sequence[str], timeout: float = 5.0) -> list[ShardPlace]:
    """What each shard of ``dsns`` says about its place (nothing is written)."""
    return [_read_one(i, dsn, timeout) for i, dsn in enumerate(dsns)]


def _claim(dsns: Sequence[str], timeout: float) -> None:
    uuids = [str(uuid.uuid4()) for _ in dsns]
    fp = fingerprint_of(uuids)
    for i, dsn in enumerate(dsns):
        try:
            with psycopg.connect(
                dsn, connect_timeout=max(1, int(timeout)), autocommit=True
            ) as conn:
                won = conn.execute(
                    QUERIES["layout_claim"],
                    {
                        "shard_uuid": uuids[i],
                        "shard_index": i,
                        "shard_count": len(dsns),
                        "fingerprint": fp,
                    },
                ).fetchone()
        except psycopg.Error as exc:  # read-only, gone meanwhile: the next start registers
            log.warning(
                "could not register the shard layout", extra={"shard": i, "error": str(exc)}
            )
            return
        if won is None and i == 0:
            # Processes started together all find a fresh cluster: the one
            # that registers shard 0 registers the rest, the others wait for
            # it (check_layout reads again) instead of racing it shard by shard.
            return
    log.info("registered the shard layout", extra={"fingerprint": fp, "shards": len(dsns)})


def layout_problems(places: Sequence[ShardPlace]) -> list[str]:
    """Every way ``places`` (one per entry of this process's list) disagrees
    with the layout the shards recorded; unreachable and unregistered shards
    are not problems here."""
    n = len(places)
    problems: list[str] = []
    fingerprints = {p.fingerprint for p in places if p.fingerprint}
    for p in places:
        if p.fingerprint is None:
            if fingerprints and p.reachable and p.migrated:
                problems.append(
                    f"shard {p.position} ({mask_dsn(p.dsn)}) belongs to no layout while the "
                    f"others belong to {sorted(fingerprints)[0]}: the shard list has changed"
                )
            continue
        if p.shard_index != p.position or p.shard_count != n:
            problems.append(
                f"VAKIT_SHARDS entry {p.position} ({mask_dsn(p.dsn)}) is shard {p.shard_index} "
                f"of {p.shard_count} in layout {p.fingerprint}, but this list makes it shard "
                f"{p.position} of {n}"
            )
    if len(fingerprints) > 1:
        problems.append(
            f"the shards belong to different layouts ({', '.join(sorted(fingerprints))})"
        )
    if not problems and all(p.shard_uuid for p in places):
        expected = fingerprint_of([p.shard_uuid or "" for p in places])
        if fingerprints != {expected}:
            problems.append(
                f"the shards' fingerprint {', '.join(sorted(fingerprints))} is not that of this "
                f"list ({expected}): another database stands in for one of them"
            )
    return problems


def _registering(places: Sequence[ShardPlace]) -> bool:
    """Some reachable shards have a layout and the others none: one process's
    registration, half done."""
    fingerprints = {p.fingerprint for p in places if p.fingerprint}
    return len(fingerprints) == 1 and any(
        p.reachable and p.migrated and p.fingerprint is None for p in places
    )


def check_layout(dsns: Sequence[str], timeout: float = 5.0) -> list[ShardPlace]:
    """Register the layout on a fresh cluster, or check this list against it.

    Raises :class:`LayoutError` when the list differs from what the shards
    recorded. An unreachable shard is skipped (the process still starts and
    serves the others); the layout is registered only when every shard answers
    and none has one.
    """
    places = read_layout(dsns, timeout)
    not_migrated = [p.position for p in places if p.reachable and not p.migrated]
    if not_migrated:
        raise LayoutError(
            f"shard(s) {', '.join(map(str, not_migrated))} not migrated to the latest schema: "
            "run `vakit migrate` with the same VAKIT_SHARDS"
        )
    if all(p.reachable and p.fingerprint is None for p in places):
        _claim(dsns, timeout)
        places = read_layout(dsns, timeout)
    problems = layout_problems(places)
    deadline = time.monotonic() + timeout
    while problems and _registering(places) and time.monotonic() < deadline:
        # Another process is registering the layout right now (some shards
        # have it, the others not yet): read again rather than refuse.
        time.sleep(0.1)
        places = read_layout(dsns, timeout)
        problems = layout_problems(places)
    if problems:
        raise LayoutError(
            "; ".join(problems)
            + ". Ids route by the slot map over this list, so every process must use the "
            "cluster's list in its order, a shard added by `vakit shards add` at its end "
            "(`vakit config check` shows each shard's place)"
        )
    for p in places:
        if not p.reachable:
            log.warning(
                "shard unreachable at start; its layout is not checked",
                extra={"shard": p.position, "error": p.error},
            )
    return places


def grow_layout(dsns: Sequence[str], new_dsn: str, timeout: float = 5.0) -> str:
    """Record ``new_dsn`` as shard ``len(dsns)`` of the layout ``dsns`` has:
    the new shard gets its place, and every shard the new count and
    fingerprint. Idempotent (a rerun after a crash finishes it); returns the
    new fingerprint. Every shard must answer."""
    if all(p.fingerprint is None for p in read_layout(dsns, timeout)):
        check_layout(dsns, timeout)  # a cluster no process has started on yet: register it first
    places = read_layout([*dsns, new_dsn], timeout)
    down = [p.position for p in places if not p.reachable]
    if down:
        raise LayoutError(
            f"shard(s) {', '.join(map(str, down))} unreachable: a shard is added with all of them up"
        )
    new = places[-1]
    uuids = [p.shard_uuid for p in places[:-1]]
    if any(u is None for u in uuids):
        raise LayoutError("the cluster's shards have no layout yet: start a process on them first")
    new_uuid = new.shard_uuid or str(uuid.uuid4())
    if new.shard_index is not None and new.shard_index != len(dsns):
        raise LayoutError(f"{mask_dsn(new_dsn)} is already shard {new.shard_index} of a layout")
    fp = fingerprint_of([*(u or "" for u in uuids), new_uuid])
    count = len(dsns) + 1
    with psycopg.connect(new_dsn, connect_timeout=max(1, int(timeout)), autocommit=True) as conn:
        conn.execute(
            QUERIES["layout_claim"],
            {
                "shard_uuid": new_uuid,
                "shard_index": len(dsns),
                "shard_count": count,
                "fingerprint": fp,
            },
        )
    for dsn in [*dsns, new_dsn]:
        with psycopg.connect(dsn, connect_timeout=max(1, int(timeout)), autocommit=True) as conn:
            conn.execute(QUERIES["layout_grow"], {"shard_count": count, "fingerprint": fp})
    log.info("grew the shard layout", extra={"fingerprint": fp, "shards": count})
    return fp
