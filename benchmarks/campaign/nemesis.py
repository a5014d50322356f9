"""The nemesis: faults picked at random from a seed, several at once.

Each lane is a thread with its own ``random.Random`` derived from the seed.
It draws the next kind from a shuffled bag of every kind (so a run of
``k`` kinds x ``n`` rounds injects each kind ``n`` times), picks a victim
that no other lane holds, injects, holds the fault for a drawn time, undoes
it, and records a :class:`~benchmarks.campaign.history.Fault`. Two lanes
make faults overlap: a worker dies while a shard is frozen.

A full disk is a shard whose data directory sits on a small tmpfs (see
``Cluster``): a filler file takes all its free space, then goes. Mounting
needs root; without it that kind is left out and the verdict says so
(``not_injected``).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.campaign.history import Fault, Recorder
from benchmarks.campaign.nodes import SESSION_SECONDS, Cluster

__all__ = ["KINDS", "Nemesis", "not_injected"]

_NO_DISK = "no small disk to fill: mounting a tmpfs needs root"


@dataclass
class _Injection:
    on: str  # the victim: a process, a shard, a link, ZooKeeper
    hold: float  # seconds the fault stays on
    undo: Callable[[], None]
    detail: str = ""


_Inject = Callable[[Cluster, random.Random, Callable[[str], bool]], _Injection | None]


def _free(rng: random.Random, names: list[str], take: Callable[[str], bool]) -> str | None:
    for name in rng.sample(names, len(names)):
        if take(name):
            return name
    return None


def _process(role: str, how: str) -> _Inject:
    def inject(c: Cluster, rng: random.Random, take: Callable[[str], bool]) -> _Injection | None:
        procs = {p.name: p for p in (c.workers if role == "worker" else c.apis)}
        name = _free(rng, sorted(procs), take)
        if name is None:
            return None
        proc = procs[name]
        if how == "kill":
            proc.kill()
            return _Injection(name, rng.uniform(0.5, 3.0), proc.start)
        proc.pause()
        # Paused past the lease (3 s + 1 s grace) at times: it wakes up with
        # claims another worker took over, the case fencing is for.
        return _Injection(name, rng.uniform(1.0, 6.0), proc.resume)

    return inject


def _shard(how: str) -> _Inject:
    def inject(c: Cluster, rng: random.Random, take: Callable[[str], bool]) -> _Injection | None:
        name = _free(rng, [f"shard{s.index}" for s in c.shards], take)
        if name is None:
            return None
        shard = c.shards[int(name.removeprefix("shard"))]
        if how == "pause":
            shard.pause()
            return _Injection(name, rng.uniform(1.0, 5.0), shard.resume)
        if how == "kill":
            shard.kill()  # SIGKILL of the postmaster and its backends
        else:
            shard.server.stop(mode="immediate")  # pg_ctl stop -m immediate
        return _Injection(name, rng.uniform(0.5, 3.0), shard.ensure_running)

    return inject


def _link(how: str) -> _Inject:
    def inject(c: Cluster, rng: random.Random, take: Callable[[str], bool]) -> _Injection | None:
        if how == "expiry":
            links = [(p.name, "zk") for p in c.workers]
        else:
            links = [k for k in c.proxies if how == "partition" or k[1] != "zk"]
        name = _free(rng, sorted(f"{p}->{link}" for p, link in links), take)
        if name is None:
            return None
        proc, link = name.split("->")
        proxy = c.proxies[(proc, link)]
        if how == "partition":
            proxy.blackhole()
            return _Injection(name, rng.uniform(1.0, 6.0), proxy.restore)
        if how == "expiry":
            # Silent past the session timeout: the server expires the session
            # for real, and the client hears so when the link comes back.
            proxy.blackhole()
            return _Injection(name, SESSION_SECONDS + rng.uniform(1.5, 3.0), proxy.restore)
        # One way: the request reaches the shard and is done there; the
        # answer never comes back (the connection is reset on its way).
        pattern = rng.choice((b"COMMIT", b"INSERT", b"UPDATE"))
        before = proxy.dropped_replies
        proxy.drop_reply_after(pattern, times=rng.randint(1, 3))

        def undo() -> None:
            proxy.drop_reply_after(b"", times=0)

        hold = rng.uniform(2.0, 6.0)
        return _Injection(name, hold, undo, f"{pattern.decode()} (dropped before: {before})")

    return inject


def _fill(path: Path) -> int:
    """Allocate ``path`` until the file system is full; returns its size. In
    halving chunks: a free-space figure read first is not what the next
    allocation gets (the file system's own pages, other writers)."""
    size, chunk = 0, 64 << 20
    with open(path, "wb") as f:
        while chunk >= 4096:
            try:
                os.posix_fallocate(f.fileno(), size, chunk)
                size += chunk
            except OSError:
                chunk //= 2
    return size


def _disk_full(c: Cluster, rng: random.Random, take: Callable[[str], bool]) -> _Injection | None:
    full = [s for s in c.shards if s.disk is not None]
    if not full or not take(f"shard{full[0].index}"):
        return None
    shard = full[0]
    assert shard.disk is not None
    filler = shard.disk / "filler"
    # Every free page: the next new WAL segment, relation extension or
    # temporary file fails with ENOSPC. Writes into space the shard holds
    # already (a preallocated WAL segment, a page with room) go on, as on a
    # real full disk: the fault bites when the shard grows.
    size = _fill(filler)

    def undo() -> None:
        filler.unlink(missing_ok=True)
        # PostgreSQL PANICs when it cannot write its WAL; it then restarts
        # itself, or waits for this.
        shard.ensure_running()

    return _Injection(
        f"shard{shard.index}", rng.uniform(4.0, 12.0), undo, f"{size >> 20} MB filler"
    )


def not_injected(cluster: Cluster) -> dict[str, str]:
    """Kinds this cluster cannot take, and why."""
    return {} if any(s.disk for s in cluster.shards) else {"disk_full": _NO_DISK}


def _zk_restart(c: Cluster, rng: random.Random, take: Callable[[str], bool]) -> _Injection | None:
    if not take("zk"):
        return None
    c.zk.stop()
    return _Injection("zk", rng.uniform(1.0, 4.0), c.zk.start)


def _clock_jump(c: Cluster, rng: random.Random, take: Callable[[str], bool]) -> _Injection | None:
    name = _free(rng, [f"clock:{p.name}" for p in c.workers], take)
    if name is None:
        return None
    worker = name.removeprefix("clock:")
    offset = rng.choice(("+90", "+900", "-60", "-900"))
    c.set_clock(worker, offset)
    return _Injection(name, rng.uniform(4.0, 12.0), lambda: c.set_clock(worker, "+0"), offset)


KINDS: dict[str, _Inject] = {
    "worker_kill": _process("worker", "kill"),
    "worker_pause": _process("worker", "pause"),
    "api_kill": _process("api", "kill"),
    "api_pause": _process("api", "pause"),
    "shard_kill": _shard("kill"),
    "shard_stop": _shard("stop"),
    "shard_pause": _shard("pause"),
    "partition": _link("partition"),
    "oneway_drop": _link("oneway"),
    "zk_restart": _zk_restart,
    "zk_expiry": _link("expiry"),
    "clock_jump": _clock_jump,
    "disk_full": _disk_full,
}


class Nemesis:
    """Runs ``lanes`` fault threads until :meth:`stop`; every fault is undone
    before its thread ends."""

    def __init__(
        self,
        cluster: Cluster,
        seed: int,
        recorder: Recorder,
        *,
        lanes: int = 2,
        gap: tuple[float, float] = (1.0, 5.0),
    ) -> None:
        self.cluster = cluster
        self.seed = seed
        self.recorder = recorder
        self.gap = gap
        self.errors: list[str] = []
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._lane, args=(i,), name=f"nemesis-{i}", daemon=True)
            for i in range(lanes)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _take(self, name: str) -> bool:
        with self._lock:
            if name in self._busy:
                return False
            self._busy.add(name)
            return True

    def _lane(self, lane: int) -> None:
        rng = random.Random(f"{self.seed}/{lane}")
        bag: list[str] = []
        while not self._stopping.wait(rng.uniform(*self.gap)):
            if not bag:
                bag = sorted(KINDS)
                rng.shuffle(bag)
            kind = bag.pop()
            start = time.time()
            taken: list[str] = []

            def take(name: str, taken: list[str] = taken) -> bool:
                ok = self._take(name)
                if ok:
                    taken.append(name)
                return ok

            if kind in not_injected(self.cluster):
                continue
            try:
                injection = KINDS[kind](self.cluster, rng, take)
                if injection is None:
                    continue  # every victim of this kind is busy in the other lane
                self._stopping.wait(injection.hold)
                injection.undo()
                self.recorder.add(Fault(kind, injection.on, start, time.time(), injection.detail))
            except Exception as exc:  # a fault that failed to apply or undo: heal() mends it
                self.errors.append(f"{kind}: {exc!r}")
            finally:
                with self._lock:
                    self._busy.difference_update(taken)
