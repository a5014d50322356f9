"""The versioned slot map and the move planner (pure; issue 42's routing)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardmap
from shardmap import SLOTS, Move, SlotMap, plan_moves


@pytest.mark.parametrize("shards", [1, 2, 3, 7, 16])
def test_epoch_zero_routes_as_the_modulo_did(shards: int) -> None:
    # Every id issued before resharding was routed by slot % N: epoch 0 must agree.
    modulo = shardmap.ShardMap(shards)
    mapped = SlotMap.modulo(shards)
    assert mapped.epoch == 0
    assert all(mapped.shard_of_slot(s) == modulo.shard_of_slot(s) for s in range(SLOTS))


def test_json_round_trip_is_compact_runs() -> None:
    start = SlotMap.modulo(2).with_shard()
    moved = start.with_moves(plan_moves(start, [0, 1, 2]))
    data = moved.to_json()
    assert SlotMap.from_json(data) == moved
    # Epoch 0 of 2 shards alternates every slot; the planned map is in long runs.
    assert len(moved.runs()) < len(SlotMap.modulo(2).runs())


def test_from_json_refuses_a_map_with_a_hole() -> None:
    with pytest.raises(ValueError, match="slot 4095 has no shard"):
        SlotMap.from_json(b'{"epoch":1,"shards":1,"runs":[[0,4094,0]]}')


def test_a_new_shard_holds_nothing_until_moves_give_it_slots() -> None:
    grown = SlotMap.modulo(2).with_shard()
    assert grown.epoch == 1
    assert grown.counts() == [2048, 2048, 0]


def test_a_move_planned_against_another_epoch_is_refused() -> None:
    current = SlotMap.modulo(2)
    with pytest.raises(ValueError, match="slot 1 is on shard 1, not 0"):
        current.with_moves([Move(1, 0, 1)])


def test_unregistered_targets_and_shards_are_refused() -> None:
    current = SlotMap.modulo(2)
    with pytest.raises(ValueError, match="shard 5 is not registered"):
        current.with_moves([Move(0, 0, 5)])
    with pytest.raises(ValueError, match=r"shards \[3\] are not registered"):
        plan_moves(current, [0, 3])
    with pytest.raises(ValueError, match="at least one shard"):
        plan_moves(current, [])


def test_adding_a_third_shard_moves_a_third_of_the_slots() -> None:
    grown = SlotMap.modulo(2).with_shard()
    moves = plan_moves(grown, [0, 1, 2])
    # 4096 / 3 = 1365 r 1: the new shard receives 1365 slots, and nothing else moves.
    assert len(moves) == 1365
    assert {m.target for m in moves} == {2}
    assert sorted(grown.with_moves(moves).counts()) == [1365, 1365, 1366]


def test_drain_moves_exactly_the_drained_shards_slots() -> None:
    current = SlotMap.modulo(3)
    moves = plan_moves(current, [0, 2])
    assert {m.source for m in moves} == {1}
    assert len(moves) == current.counts()[1]
    assert current.with_moves(moves).counts() == [2048, 0, 2048]


@settings(max_examples=60, deadline=None)
@given(
    shards=st.integers(min_value=1, max_value=9),
    data=st.data(),
)
def test_any_plan_is_even_minimal_and_a_fixpoint(shards: int, data: st.DataObject) -> None:
    # A map reached by earlier rebalances, from epoch 0 of some shards.
    current = SlotMap.modulo(shards)
    for _ in range(data.draw(st.integers(min_value=0, max_value=2))):
        if current.shard_count < 12 and data.draw(st.booleans()):
            current = current.with_shard()
        live = data.draw(st.sets(st.integers(0, current.shard_count - 1), min_size=1), label="live")
        current = current.with_moves(plan_moves(current, live))
    active = data.draw(st.sets(st.integers(0, current.shard_count - 1), min_size=1))
    moves = plan_moves(current, active)
    after = current.with_moves(moves)
    counts = after.counts()
    share = [counts[s] for s in sorted(active)]
    # Even: active shards differ by at most one slot; the others hold none.
    assert max(share) - min(share) <= 1
    assert all(counts[s] == 0 for s in range(after.shard_count) if s not in active)
    # Minimal: a slot moves only off a shard above its share, onto one below it.
    before = current.counts()
    assert len({m.slot for m in moves}) == len(moves)
    assert len(moves) == sum(max(0, before[s] - counts[s]) for s in range(after.shard_count))
    # A fixpoint: planning again on the result moves nothing (a rerun resumes).
    assert plan_moves(after, active) == []
