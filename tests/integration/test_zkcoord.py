"""ZooKeeper coordination against real servers: ownership, leadership, faults.

Sessions are 4 s (the servers tick every 200 ms), so expiry, fencing and
failover happen within a test's patience. Deadlines asserted here are
requirements (a fenced leader stops within half the session timeout), never
speed goals.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime

import pytest
from kazoo.client import KazooClient
from prometheus_client import REGISTRY

from cluster.coordination.assignment import assign_shards
from cluster.coordination.base import Member
from cluster.coordination.view import ZkClusterView
from cluster.coordination.zookeeper import ZkCoordinator
from cluster.errors import CoordinationUnavailable
from cluster.local.childproc import find_free_port
from cluster.local.zkserver import ZkEnsemble, ZkServer
from tests.helpers import wait_for
from tests.tcpproxy import TcpProxy
from tests.zkfixtures import ZkEndpoint

pytestmark = pytest.mark.integration

SESSION = 4.0
CONVERGE = 15.0  # generous: a loaded test machine, never a speed goal


def member(member_id: str) -> Member:
    return Member(
        id=member_id, host="test-host", pid=4242, version="test", started_at=datetime.now(UTC)
    )


MakeCoord = Callable[..., ZkCoordinator]


@pytest.fixture
def make_coord(zk_connect: str) -> Iterator[MakeCoord]:
    """Start coordinators in this test's chroot (or at ``connect=``); stop them all after."""
    made: list[ZkCoordinator] = []

    def make(
        member_id: str,
        *,
        shard_count: int,
        connect: str | None = None,
        session_timeout: float = SESSION,
    ) -> ZkCoordinator:
        coord = ZkCoordinator(
            connect or zk_connect,
            member=member(member_id),
            shard_count=shard_count,
            session_timeout=session_timeout,
            start_timeout=CONVERGE,
        )
        made.append(coord)
        coord.start()
        return coord

    yield make
    for coord in made:
        coord.stop()


def leaders_of(coords: Sequence[ZkCoordinator], shard: int) -> list[str]:
    return [c.member_id for c in coords if c.is_leader(shard)]


def agreed(coords: Sequence[ZkCoordinator], shard_count: int) -> bool:
    """Every coordinator owns what assign_shards gives it over exactly these members."""
    expected = assign_shards([c.member_id for c in coords], shard_count)
    return all(c.owned_shards() == expected[c.member_id] for c in coords)


def steady(coords: Sequence[ZkCoordinator], shard_count: int) -> bool:
    """All connected, ownership agreed, each shard led by exactly one of its owners."""
    if any(c.session_state() != "CONNECTED" for c in coords):
        return False
    if not agreed(coords, shard_count):
        return False
    for shard in range(shard_count):
        leaders = [c for c in coords if c.is_leader(shard)]
        if len(leaders) != 1 or shard not in leaders[0].owned_shards():
            return False
    return True


def wait_steady(coords: Sequence[ZkCoordinator], shard_count: int, what: str) -> float:
    """Wait for a steady state; return how long it took."""
    started = time.monotonic()
    wait_for(lambda: steady(coords, shard_count), timeout=CONVERGE, interval=0.02, what=what)
    return time.monotonic() - started


def chroot_of(connect: str) -> str:
    return "/" + connect.partition("/")[2]


def expire_session(coord: ZkCoordinator, hosts: str) -> None:
    """Expire ``coord``'s session for real: attach a second client to it, then close that."""
    client_id = coord.client.client_id
    assert client_id is not None, "coordinator is not connected"
    other = KazooClient(hosts=hosts, client_id=client_id, timeout=SESSION)
    other.start(timeout=10)
    other.stop()
    other.close()


def counter(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


# -- assign_shards (pure) ----------------------------------------------------


def test_assign_shards_properties() -> None:
    rng = random.Random(7)
    for n, shard_count in itertools.product(range(0, 13), range(1, 17)):
        ids = [f"worker-{rng.randrange(10**6)}-{i}" for i in range(n)]
        got = assign_shards(ids, shard_count)
        assert set(got) == set(ids)
        # Deterministic: any order, duplicates included, gives the same map.
        shuffled = ids + ids[: n // 2]
        rng.shuffle(shuffled)
        assert assign_shards(shuffled, shard_count) == got
        if not ids:
            assert got == {}
            continue
        owners = {s: [m for m in ids if s in got[m]] for s in range(shard_count)}
        assert all(owners[s] for s in range(shard_count)), "a shard has no owner"
        assert all(0 <= s < shard_count for shards in got.values() for s in shards)
        if n <= shard_count:
            assert all(len(owners[s]) == 1 for s in range(shard_count))
            sizes = [len(got[m]) for m in ids]
        else:
            assert all(len(got[m]) == 1 for m in ids)
            sizes = [len(owners[s]) for s in range(shard_count)]
        assert max(sizes) - min(sizes) <= 1, (n, shard_count, sizes)
        assert min(sizes) >= 1


def test_assign_shards_rejects_no_shards() -> None:
    with pytest.raises(ValueError):
        assign_shards(["a"], 0)


def test_assign_shards_moves_few_shards_on_join() -> None:
    # Not a contract, a quality: a join should not reshuffle everything.
    before = assign_shards([f"w{i}" for i in range(4)], 64)
    after = assign_shards([f"w{i}" for i in range(5)], 64)
    moved = sum(1 for m in before for s in before[m] if s not in after[m])
    assert moved < 64 // 2


# -- against a real server ---------------------------------------------------


def test_start_fails_clearly_without_zookeeper() -> None:
    coord = ZkCoordinator(
        f"127.0.0.1:{find_free_port()}",
        member=member("lonely"),
        shard_count=2,
        session_timeout=SESSION,
        start_timeout=1.0,
    )
    with pytest.raises(CoordinationUnavailable, match="could not connect to ZooKeeper"):
        coord.start()
    coord.stop()
    assert coord.owned_shards() == frozenset()


def test_join_and_leave_rebalance_everywhere(make_coord: MakeCoord, zk_connect: str) -> None:
    shards = 8
    a = make_coord("a", shard_count=shards)
    wait_steady([a], shards, "a alone owns and leads everything")
    assert a.owned_shards() == frozenset(range(shards))
    assert a.led_shards() == frozenset(range(shards))

    rebalances = counter("vakit_rebalances_total")
    joined = time.monotonic()
    b = make_coord("b", shard_count=shards)
    took = wait_steady([a, b], shards, "a and b agree after b joins")
    print(f"\nrebalance after a join: {time.monotonic() - joined:.3f} s (steady {took:.3f} s)")
    assert counter("vakit_rebalances_total") > rebalances

    c = make_coord("c", shard_count=shards)
    wait_steady([a, b, c], shards, "a, b and c agree after c joins")
    assert sorted(len(x.owned_shards()) for x in (a, b, c)) == [2, 3, 3]

    left = time.monotonic()
    b.stop()
    b.stop()  # idempotent
    wait_steady([a, c], shards, "a and c agree after b leaves")
    print(f"rebalance after a leave: {time.monotonic() - left:.3f} s")
    assert not any(b.is_leader(s) for s in range(shards))

    view = ZkClusterView(zk_connect)
    view.start()
    try:
        assert [m.id for m in view.members()] == ["a", "c"]
    finally:
        view.stop()


@pytest.mark.parametrize(("members", "shards"), [(3, 5), (5, 2)])
def test_one_leader_per_shard_among_its_owners(
    make_coord: MakeCoord, members: int, shards: int
) -> None:
    coords = [make_coord(f"m{i}", shard_count=shards) for i in range(members)]
    wait_steady(coords, shards, "one leader per shard")
    # And it stays so: nothing flaps in steady state.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        for shard in range(shards):
            leaders = leaders_of(coords, shard)
            assert len(leaders) == 1, (shard, leaders)
        time.sleep(0.05)
    led = sorted(s for c in coords for s in c.led_shards())
    assert led == list(range(shards))


def test_cluster_view_matches_coordinators(make_coord: MakeCoord, zk_connect: str) -> None:
    shards = 3
    coords = [make_coord(f"v{i}", shard_count=shards) for i in range(4)]
    wait_steady(coords, shards, "steady before reading the view")
    view = ZkClusterView(zk_connect)
    view.start()
    try:
        members = view.members()
        assert [m.id for m in members] == ["v0", "v1", "v2", "v3"]
        assert all(m.host == "test-host" and m.pid == 4242 for m in members)
        assert all(m.started_at.tzinfo is not None for m in members)
        statuses = view.shards(shards)
        assert [s.shard for s in statuses] == list(range(shards))
        for status in statuses:
            owners = tuple(sorted(c.member_id for c in coords if status.shard in c.owned_shards()))
            assert status.owners == owners
            assert [status.leader] == leaders_of(coords, status.shard)
    finally:
        view.stop()


def test_force_leader_overrides_the_election(make_coord: MakeCoord) -> None:
    a = make_coord("a", shard_count=2)
    b = make_coord("b", shard_count=2)
    wait_steady([a, b], 2, "steady")
    shard = next(iter(b.owned_shards()))
    assert not a.is_leader(shard)
    heard = threading.Event()
    a.add_listener(heard.set)
    a.force_leader(shard, True)
    assert a.is_leader(shard) and b.is_leader(shard)  # two leaders at once, on purpose
    assert heard.wait(1)
    b.force_leader(shard, False)
    assert not b.is_leader(shard)
    a.force_leader(shard, None)
    b.force_leader(shard, None)
    wait_steady([a, b], 2, "the election rules again")


def test_session_expiry_moves_leadership(
    make_coord: MakeCoord, zk_server: ZkEndpoint, zk_connect: str
) -> None:
    shards = 2
    coords = [make_coord(f"e{i}", shard_count=shards) for i in range(3)]
    wait_steady(coords, shards, "steady before the expiry")
    # The shard with two owners: its other owner takes over directly.
    shared = next(s for s in range(shards) if sum(s in c.owned_shards() for c in coords) == 2)
    old = next(c for c in coords if c.is_leader(shared))
    heir = next(c for c in coords if c is not old and shared in c.owned_shards())
    old_session = old.client.client_id

    t0 = time.monotonic()
    expire_session(old, zk_connect)
    wait_for(lambda: not old.led_shards(), timeout=SESSION, interval=0.01, what="old leader steps down")
    stepped_down = time.monotonic() - t0
    wait_for(lambda: heir.is_leader(shared), timeout=CONVERGE, interval=0.01, what="heir leads")
    failover = time.monotonic() - t0
    assert not old.is_leader(shared)
    print(f"\nexpiry: old leader off after {stepped_down:.3f} s, heir leads after {failover:.3f} s")

    # The old member registers again in a new session and owns shards again.
    wait_steady(coords, shards, "steady after the old member rejoined")
    assert old.client.client_id != old_session
    assert old.owned_shards()


@contextlib.contextmanager
def proxied_leader(
    make_coord: MakeCoord, zk_server: ZkEndpoint, zk_connect: str
) -> Iterator[tuple[TcpProxy, ZkCoordinator, ZkCoordinator]]:
    """One shard, two owners: the first, which reaches ZooKeeper through a
    proxy the test can cut, leads; the other, connected directly, waits."""
    host, _, port = zk_server.connect_string.partition(":")
    with TcpProxy(host, int(port)) as proxy:
        leader = make_coord("via-proxy", shard_count=1, connect=proxy.address + chroot_of(zk_connect))
        wait_steady([leader], 1, "the proxied member leads")
        other = make_coord("direct", shard_count=1)
        wait_steady([leader, other], 1, "steady with two owners")
        yield proxy, leader, other


def test_blackholed_leader_stops_within_half_the_session(
    make_coord: MakeCoord, zk_server: ZkEndpoint, zk_connect: str
) -> None:
    with proxied_leader(make_coord, zk_server, zk_connect) as (proxy, leader, other):
        assert leader.is_leader(0) and not other.is_leader(0)
        owned = leader.owned_shards()
        fenced = threading.Event()
        fenced_at: list[float] = []

        def on_change() -> None:
            if not leader.led_shards() and not fenced.is_set():
                fenced_at.append(time.monotonic())
                fenced.set()

        leader.add_listener(on_change)

        t0 = time.monotonic()
        proxy.blackhole()
        while leader.is_leader(0):
            assert time.monotonic() - t0 < SESSION, "leader never stepped down"
            assert leader.owned_shards() == owned
            time.sleep(0.005)
        stepped_down = time.monotonic() - t0
        assert stepped_down < SESSION / 2, f"leader kept leading {stepped_down:.3f} s"
        assert fenced.wait(SESSION / 2)
        assert fenced_at[0] - t0 < SESSION / 2

        wait_for(lambda: other.is_leader(0), timeout=CONVERGE, interval=0.01, what="failover")
        failover = time.monotonic() - t0
        assert not leader.is_leader(0)
        assert leader.owned_shards() == owned, "ownership is kept while ZooKeeper is unreachable"
        print(
            f"\nblackhole: leader off after {stepped_down:.3f} s "
            f"(listeners {fenced_at[0] - t0:.3f} s), other leads after {failover:.3f} s"
        )

        session = leader.client.client_id
        restored = time.monotonic()
        proxy.restore()
        # The partition outlived the session: the member comes back in a new
        # one, registers again and competes again.
        wait_for(
            lambda: leader.client.client_id not in (None, session),
            timeout=CONVERGE,
            interval=0.01,
            what="a new session for the partitioned member",
        )
        wait_steady([leader, other], 1, "steady after the partition healed")
        view = ZkClusterView(zk_connect)
        view.start()
        try:
            wait_for(
                lambda: [m.id for m in view.members()] == ["direct", "via-proxy"],
                timeout=CONVERGE,
                what="the partitioned member registered again",
            )
        finally:
            view.stop()
        print(f"blackhole: converged {time.monotonic() - restored:.3f} s after restore")
        assert other.is_leader(0) and not leader.is_leader(0)


def test_cut_and_refused_connections_resume_the_session(
    make_coord: MakeCoord, zk_server: ZkEndpoint, zk_connect: str
) -> None:
    with proxied_leader(make_coord, zk_server, zk_connect) as (proxy, leader, other):
        session = leader.client.client_id
        states: list[str] = []
        leader.add_listener(lambda: states.append(leader.session_state()))
        other_led: list[bool] = []
        other.add_listener(lambda: other_led.append(other.is_leader(0)))

        # A reset connection: leadership pauses while SUSPENDED, and comes back
        # to the same member in the same session once it reconnects.
        proxy.cut()
        wait_for(lambda: "SUSPENDED" in states, timeout=SESSION, interval=0.01, what="SUSPENDED")
        wait_for(lambda: leader.is_leader(0), timeout=CONVERGE, interval=0.01, what="leads again")
        assert leader.client.client_id == session

        # Refused for a while, well within the session (kazoo's reconnect
        # backoff adds up to a second): the same again.
        proxy.refuse()
        wait_for(lambda: not leader.is_leader(0), timeout=SESSION / 2, interval=0.01, what="paused")
        time.sleep(SESSION / 8)
        assert leader.owned_shards() == frozenset({0})
        proxy.restore()
        wait_for(lambda: leader.is_leader(0), timeout=CONVERGE, interval=0.01, what="leads again")
        assert leader.client.client_id == session
        assert True not in other_led, "the other member must not lead while the session lives"


def test_stop_returns_while_partitioned(
    make_coord: MakeCoord, zk_server: ZkEndpoint, zk_connect: str
) -> None:
    # kazoo still says CONNECTED here, so stop() tries to withdraw over a dead
    # link: that must give up, not wait for a reconnect that never comes.
    host, _, port = zk_server.connect_string.partition(":")
    with TcpProxy(host, int(port)) as proxy:
        coord = make_coord("doomed", shard_count=2, connect=proxy.address + chroot_of(zk_connect))
        wait_steady([coord], 2, "leads")
        proxy.blackhole()
        t0 = time.monotonic()
        coord.stop()
        took = time.monotonic() - t0
        print(f"\nstop while blackholed took {took:.3f} s")
        assert not coord.led_shards() and not coord.owned_shards()
        assert took < 2 * SESSION, f"stop() took {took:.1f} s"


def test_zookeeper_down_keeps_ownership_and_stops_leadership(
    make_coord: MakeCoord, zk_server_factory: Callable[..., ZkServer]
) -> None:
    server = zk_server_factory()
    connect = server.connect_string + "/down"
    shards = 4
    coords = [make_coord(f"d{i}", shard_count=shards, connect=connect) for i in range(2)]
    wait_steady(coords, shards, "steady before the outage")
    owned = {c.member_id: c.owned_shards() for c in coords}
    leaders = {s: leaders_of(coords, s) for s in range(shards)}
    view = ZkClusterView(connect, timeout=1.0)
    view.start()

    server.kill()
    t0 = time.monotonic()
    wait_for(
        lambda: not any(c.led_shards() for c in coords),
        timeout=SESSION / 2,
        interval=0.01,
        what="every leader steps down",
    )
    print(f"\nserver killed: leaders off after {time.monotonic() - t0:.3f} s")
    while time.monotonic() - t0 < 3.0:
        assert {c.member_id: c.owned_shards() for c in coords} == owned
        assert not any(c.led_shards() for c in coords)
        time.sleep(0.05)
    # The API's view answers at once that it cannot know, rather than hang.
    with pytest.raises(CoordinationUnavailable):
        view.members()

    restarted = time.monotonic()
    server.start()
    wait_steady(coords, shards, "ownership and leadership return")
    print(f"server restarted: steady {time.monotonic() - restarted:.3f} s after it served again")
    assert {c.member_id: c.owned_shards() for c in coords} == owned
    # The sessions outlived the outage (ZooKeeper persists them), so the same nodes lead.
    assert {s: leaders_of(coords, s) for s in range(shards)} == leaders
    try:
        wait_for(lambda: view.connected, timeout=CONVERGE, what="the view reconnects")
        assert [s.leader for s in view.shards(shards)] == [leaders[s][0] for s in range(shards)]
    finally:
        view.stop()


def test_paused_server_fences_leaders_within_half_the_session(
    make_coord: MakeCoord, zk_server_factory: Callable[..., ZkServer]
) -> None:
    # A hung server (SIGSTOP): sockets open, no answers, the blackhole seen
    # from the other side.
    server = zk_server_factory()
    connect = server.connect_string + "/paused"
    coords = [make_coord(f"p{i}", shard_count=2, connect=connect) for i in range(2)]
    wait_steady(coords, 2, "steady before the pause")

    server.pause()
    t0 = time.monotonic()
    try:
        while any(c.led_shards() for c in coords):
            assert time.monotonic() - t0 < SESSION / 2, "a leader outlived half the session"
            time.sleep(0.005)
        print(f"\nserver paused: leaders off after {time.monotonic() - t0:.3f} s")
    finally:
        server.resume()
    wait_steady(coords, 2, "steady after the server resumed")


def test_ensemble_keeps_working_when_a_node_dies(
    make_coord: MakeCoord, zk_ensemble: ZkEnsemble
) -> None:
    connect = zk_ensemble.connect_string + "/ensemble"
    shards = 3
    coords = [make_coord(f"q{i}", shard_count=shards, connect=connect) for i in range(2)]
    wait_steady(coords, shards, "steady on the ensemble")

    disrupted: set[str] = set()

    def watch(coord: ZkCoordinator) -> None:
        def on_change() -> None:
            if coord.session_state() != "CONNECTED":
                disrupted.add(coord.member_id)

        coord.add_listener(on_change)

    for coord in coords:
        watch(coord)
    victim = zk_ensemble.leader()
    assert victim is not None
    # Every server stops serving until a new quorum leader is elected, so
    # every client is disconnected and must find a live server.
    zk_ensemble.kill(victim)
    t0 = time.monotonic()
    wait_for(lambda: len(disrupted) == len(coords), timeout=CONVERGE, what="disconnects")
    wait_steady(coords, shards, "steady after the quorum leader died")
    print(f"\nensemble leader killed: steady again {time.monotonic() - t0:.3f} s after the kill")

    newcomer = make_coord("q-new", shard_count=shards, connect=connect)
    coords.append(newcomer)
    wait_steady(coords, shards, "steady after a join on the degraded ensemble")
    assert newcomer.owned_shards()
    print(f"ensemble: newcomer joined and owns shards {time.monotonic() - t0:.3f} s after the kill")
