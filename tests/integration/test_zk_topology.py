"""The shard list, the move record and the mover lock in a real ZooKeeper."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from cluster.coordination.topology import Topology, ZkTopology
from cluster.errors import Conflict
from shardmap import SlotMap
from tests.helpers import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def topology(zk_connect: str) -> Iterator[ZkTopology]:
    made = ZkTopology(zk_connect, ["pg-0", "pg-1"], timeout=10.0)
    made.start()
    yield made
    made.stop()


def test_the_configured_list_until_a_shard_is_added(topology: ZkTopology) -> None:
    assert topology.shard_dsns() == ("pg-0", "pg-1")
    assert topology.read_map() == SlotMap.modulo(2)
    assert topology.register_shard(2, "pg-2") == 2
    assert topology.shard_dsns() == ("pg-0", "pg-1", "pg-2")
    # A retry whose answer was lost finds its own entry: no second index.
    assert topology.register_shard(2, "pg-2") == 2
    assert topology.shard_dsns() == ("pg-0", "pg-1", "pg-2")


def test_two_adds_at_once_get_one_index_each_or_a_conflict(
    topology: ZkTopology, zk_connect: str
) -> None:
    other = ZkTopology(zk_connect, ["pg-0", "pg-1"])
    other.start()
    try:
        results: list[object] = []

        def add(t: ZkTopology, dsn: str) -> None:
            try:
                results.append(t.register_shard(2, dsn))
            except Conflict as exc:
                results.append(exc)

        threads = [
            threading.Thread(target=add, args=(t, d)) for t, d in ((topology, "a"), (other, "b"))
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert sorted(map(type, results), key=str) == sorted([int, Conflict], key=str)
        assert len(topology.shard_dsns()) == 3
    finally:
        other.stop()


def test_a_process_started_with_more_shards_keeps_its_own_names(
    zk_connect: str, topology: ZkTopology
) -> None:
    topology.register_shard(2, "pg-2")
    # Another host reaches the first shards under other names: those stay its own.
    elsewhere = ZkTopology(zk_connect, ["host-a/0", "host-a/1"])
    elsewhere.start()
    try:
        assert elsewhere.shard_dsns() == ("host-a/0", "host-a/1", "pg-2")
    finally:
        elsewhere.stop()


def test_watchers_see_a_new_shard_and_a_new_map(topology: ZkTopology, zk_connect: str) -> None:
    seen: list[Topology] = []
    watcher = ZkTopology(zk_connect, ["pg-0", "pg-1"])
    watcher.start()
    try:
        watcher.watch(seen.append)
        wait_for(lambda: seen, timeout=10, what="the first call")
        topology.register_shard(2, "pg-2")
        grown = SlotMap.modulo(2).with_shard()
        topology.replace_map(0, grown)
        wait_for(
            lambda: seen[-1].dsns == ("pg-0", "pg-1", "pg-2") and seen[-1].slots == grown,
            timeout=10,
            what="the new shard and map",
        )
    finally:
        watcher.stop()


def test_the_move_record_is_compare_and_set(topology: ZkTopology) -> None:
    assert topology.read_move() == (None, -1)
    v0 = topology.write_move({"id": "a"}, -1)
    with pytest.raises(Conflict):
        topology.write_move({"id": "b"}, -1)
    v1 = topology.write_move({"id": "a", "step": 1}, v0)
    with pytest.raises(Conflict):
        topology.write_move({"id": "stale"}, v0)
    assert topology.read_move() == ({"id": "a", "step": 1}, v1)


def test_one_mover_holds_the_lock(topology: ZkTopology, zk_connect: str) -> None:
    other = ZkTopology(zk_connect, ["pg-0", "pg-1"])
    other.start()
    try:
        mine, theirs = topology.mover_lock("me"), other.mover_lock("them")
        assert mine.acquire(timeout=5)
        assert topology.holds(mine)()
        assert not other.try_lock(theirs, 0.5)
        mine.release()
        assert not topology.holds(mine)()
        assert theirs.acquire(timeout=5)
        theirs.release()
    finally:
        other.stop()


def test_retired_shards(topology: ZkTopology) -> None:
    assert topology.retired() == frozenset()
    topology.set_retired(1, True)
    topology.set_retired(1, True)
    assert topology.retired() == frozenset({1})
    topology.set_retired(1, False)
    assert topology.retired() == frozenset()
