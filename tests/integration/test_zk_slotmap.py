"""The slot map in a real ZooKeeper: compare-and-set, retry-safe, watched."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from cluster.coordination.slotmap import StaleSlotMap, ZkSlotMap
from shardmap import SlotMap, plan_moves
from tests.helpers import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def client(zk_connect: str) -> Iterator[KazooClient]:
    made = KazooClient(hosts=zk_connect, timeout=5.0)
    made.start(timeout=10.0)
    yield made
    made.stop()
    made.close()


def rebalanced(start: SlotMap) -> SlotMap:
    """The next epoch: ``start``'s slots spread evenly over all its shards."""
    return start.with_moves(plan_moves(start, range(start.shard_count)))


def test_no_stored_map_is_epoch_zero_of_the_configured_shards(client: KazooClient) -> None:
    keeper = ZkSlotMap(client, "/vakit", shard_count=2)
    assert keeper.read() == SlotMap.modulo(2)
    assert client.exists("/vakit/slotmap") is None  # reading writes nothing


def test_replace_is_compare_and_set_on_the_epoch(client: KazooClient) -> None:
    keeper = ZkSlotMap(client, "/vakit", shard_count=2)
    one = SlotMap.modulo(2).with_shard()
    assert keeper.replace(0, one) == one
    assert ZkSlotMap(client, "/vakit", shard_count=2).read() == one
    # Planned against epoch 0 again: refused, and the stored map is unchanged.
    with pytest.raises(StaleSlotMap, match="at epoch 1, not 0"):
        keeper.replace(0, SlotMap(1, 2, SlotMap.modulo(2).owners[::-1]))
    assert keeper.read() == one
    with pytest.raises(ValueError, match="next map of epoch 1 is 2"):
        keeper.replace(1, one)


def test_a_repeated_write_of_the_same_map_succeeds(client: KazooClient) -> None:
    # What kazoo's retry does when a write's answer is lost: write it again.
    keeper = ZkSlotMap(client, "/vakit", shard_count=2)
    one = SlotMap.modulo(2).with_shard()
    keeper.replace(0, one)
    assert keeper.replace(0, one) == one
    two = rebalanced(one)
    keeper.replace(1, two)
    assert keeper.replace(1, two) == two
    assert keeper.read() == two


def test_of_two_movers_planning_on_one_epoch_exactly_one_wins(zk_connect: str) -> None:
    start = SlotMap.modulo(2).with_shard()
    rivals = [rebalanced(start), start.with_moves(plan_moves(start, [0, 2]))]
    clients = [KazooClient(hosts=zk_connect, timeout=5.0) for _ in rivals]
    outcomes: list[str] = []
    barrier = threading.Barrier(len(rivals))

    def move(client: KazooClient, new: SlotMap) -> None:
        keeper = ZkSlotMap(client, "/vakit", shard_count=2)
        keeper.replace(0, start)  # both agree on epoch 1 (idempotent)
        barrier.wait()
        try:
            keeper.replace(1, new)
            outcomes.append("won")
        except StaleSlotMap:
            outcomes.append("stale")

    try:
        for c in clients:
            c.start(timeout=10.0)
        threads = [
            threading.Thread(target=move, args=pair) for pair in zip(clients, rivals, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert sorted(outcomes) == ["stale", "won"]
        stored = ZkSlotMap(clients[0], "/vakit", shard_count=2).read()
        assert stored.epoch == 2 and stored in rivals
    finally:
        for c in clients:
            c.stop()
            c.close()


def test_a_watcher_sees_each_newer_epoch(zk_connect: str, client: KazooClient) -> None:
    other = KazooClient(hosts=zk_connect, timeout=5.0)
    other.start(timeout=10.0)
    try:
        watcher = ZkSlotMap(other, "/vakit", shard_count=2)
        seen: list[int] = []
        watcher.watch(lambda new: seen.append(new.epoch))
        wait_for(lambda: seen == [0], timeout=10)
        one = SlotMap.modulo(2).with_shard()
        ZkSlotMap(client, "/vakit", shard_count=2).replace(0, one)
        wait_for(lambda: seen == [0, 1], timeout=10)
        assert watcher.current() == one
    finally:
        other.stop()
        other.close()


def test_a_watcher_sees_the_maps_its_own_process_writes(client: KazooClient) -> None:
    """The mover and the router of one process share a keeper: a map the mover
    stored is still delivered to the router's watch."""
    keeper = ZkSlotMap(client, "/vakit", shard_count=2)
    seen: list[SlotMap] = []
    keeper.watch(seen.append)
    wait_for(lambda: seen, timeout=10, what="the first call")
    grown = keeper.replace(0, SlotMap.modulo(2).with_shard())
    wait_for(lambda: seen[-1] == grown, timeout=10, what="our own map delivered")
