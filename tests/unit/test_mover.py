"""The mover's steps against an in-memory ledger and shards: every batch's
rows end on the shard the map names, once; a mover that dies at any step is
resumed; a cancel never rolls back past a flip; a wave postpones a batch.

The real shards and ZooKeeper are in tests/integration/test_resharding.py;
this is the state machine alone, every crash point of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from cluster.errors import Conflict
from cluster.resharding.ledger import MoveRecord
from cluster.resharding.mover import MoverSettings, SlotMover, active_shards
from shardmap import SLOTS, SlotMap


class Ledger:
    def __init__(self, start: SlotMap) -> None:
        self.map = start
        self.record: dict[str, Any] | None = None
        self.version = -1
        self.retired_shards: frozenset[int] = frozenset()

    def read_move(self) -> tuple[dict[str, Any] | None, int]:
        return self.record, self.version

    def write_move(self, record: dict[str, Any], version: int) -> int:
        if version != self.version:
            raise Conflict("version")
        self.record, self.version = record, self.version + 1
        return self.version

    def read_map(self) -> SlotMap:
        return self.map

    def replace_map(self, expected_epoch: int, new: SlotMap) -> SlotMap:
        if self.map.epoch != expected_epoch:
            raise Conflict("epoch")
        self.map = new
        return new

    def retired(self) -> frozenset[int]:
        return self.retired_shards


class Died(BaseException):  # a SIGKILL: nothing catches it
    pass


class Shards:
    """Rows by shard and slot, fences by shard; dies after ``die_after`` calls."""

    def __init__(self, start: SlotMap, rows_per_slot: int = 2) -> None:
        self.shard_count = start.shard_count
        self.rows: list[dict[int, set[str]]] = [{} for _ in range(start.shard_count)]
        for slot, owner in enumerate(start.owners):
            self.rows[owner][slot] = {f"{slot}-{i}" for i in range(rows_per_slot)}
        self.fences: list[dict[int, str]] = [{} for _ in range(start.shard_count)]
        self.die_after: int | None = None
        self.due = 0
        self.indexed: dict[int, bool] = {}

    def _tick(self) -> None:
        if self.die_after is not None:
            self.die_after -= 1
            if self.die_after == 0:
                self.die_after = None
                raise Died

    async def fence_slots(self, shard: int, slots: Sequence[int], state: str) -> None:
        self.fences[shard].update(dict.fromkeys(slots, state))
        self._tick()

    async def unfence_slots(self, shard: int, slots: Sequence[int]) -> None:
        for s in slots:
            self.fences[shard].pop(s, None)
        self._tick()

    async def fenced_slots(self, shard: int) -> dict[int, str]:
        return dict(self.fences[shard])

    async def wait_for_older_transactions(self, shard: int, timeout: float) -> None:
        self._tick()

    async def copy_slots(self, source: int, target: int, slots: Sequence[int]) -> dict[str, int]:
        # All or nothing, with the 'copied' fence in the same step, as on
        # PostgreSQL; a copy run again after it finds the fence.
        n = 0
        if not all(self.fences[target].get(s) == "copied" for s in slots):
            for s in slots:
                got = self.rows[source].get(s, set())
                self.rows[target].setdefault(s, set()).update(got)
                self.fences[target][s] = "copied"
                n += len(got)
        self._tick()
        return {"jobs": n}

    async def discard_copy(self, shard: int, slots: Sequence[int]) -> dict[str, int]:
        n = sum(len(self.rows[shard].pop(s, set())) for s in slots)
        self.fences[shard].update(dict.fromkeys(slots, "absent"))
        self._tick()
        return {"jobs": n}

    async def delete_slots(self, shard: int, slots: Sequence[int]) -> dict[str, int]:
        n = sum(len(self.rows[shard].pop(s, set())) for s in slots)
        self._tick()
        return {"jobs": n}

    async def slot_rows(self, shard: int, slots: Sequence[int] | None = None) -> dict[str, int]:
        return {"jobs": sum(len(r) for r in self.rows[shard].values())}

    async def due_within(self, shard: int, slots: Sequence[int], seconds: float) -> int:
        return self.due

    async def index_slots(self, shard: int, present: bool) -> None:
        self.indexed[shard] = present

    def serving(self, shard: int, slot: int) -> bool:
        return slot not in self.fences[shard]


SETTINGS = MoverSettings(batch_slots=300, postpone_seconds=0.0)


def grown() -> tuple[Ledger, Shards]:
    start = SlotMap.modulo(2)
    shards = Shards(start)
    shards.shard_count = 3
    shards.rows.append({})
    shards.fences.append(dict.fromkeys(range(SLOTS), "absent"))
    ledger = Ledger(start.with_shard())
    return ledger, shards


def start_move(ledger: Ledger, kind: str = "rebalance", drain: int | None = None) -> None:
    ledger.write_move(MoveRecord.new(kind, drain, 0, 0.0).to_json(), ledger.version)


def check_placed(ledger: Ledger, shards: Shards) -> None:
    """Every slot's rows are on its map shard alone, which serves it; no other does."""
    for slot in range(SLOTS):
        owner = ledger.map.owners[slot]
        holders = [i for i in range(shards.shard_count) if shards.rows[i].get(slot)]
        assert holders == [owner], (slot, holders, owner)
        servers = [i for i in range(shards.shard_count) if shards.serving(i, slot) and i == owner]
        assert servers == [owner]
        # A former owner never serves it again: it is fenced 'absent'.
        for i in range(shards.shard_count):
            if i != owner and slot in shards.fences[i]:
                assert shards.fences[i][slot] == "absent"


def test_a_rebalance_moves_every_slot_to_an_even_share() -> None:
    ledger, shards = grown()
    start_move(ledger)
    record = asyncio.run(SlotMover(ledger, shards, SETTINGS).run(asyncio.Event()))
    assert record is not None and record.state == "done"
    assert sorted(ledger.map.counts()) == [1365, 1365, 1366]
    assert record.slots_done == 1365 and record.rows_copied == 2 * 1365
    check_placed(ledger, shards)
    # The sources were indexed by slot while they gave slots away, not after.
    assert set(shards.indexed) == {0, 1, 2} and not any(shards.indexed.values())


@pytest.mark.parametrize("die_after", range(1, 16))
def test_a_mover_dying_at_any_call_is_resumed_by_the_next(die_after: int) -> None:
    ledger, shards = grown()
    start_move(ledger)
    shards.die_after = die_after
    with pytest.raises(Died):
        asyncio.run(SlotMover(ledger, shards, SETTINGS).run(asyncio.Event()))
    record = asyncio.run(SlotMover(ledger, shards, SETTINGS).run(asyncio.Event()))
    assert record is not None and record.state == "done"
    check_placed(ledger, shards)


@pytest.mark.parametrize("die_after", range(1, 8))
def test_a_cancel_rolls_back_only_what_has_not_flipped(die_after: int) -> None:
    ledger, shards = grown()
    start_move(ledger)
    shards.die_after = die_after
    with pytest.raises(Died):
        asyncio.run(SlotMover(ledger, shards, SETTINGS).run(asyncio.Event()))
    assert ledger.record is not None
    cancelling = replace(MoveRecord.from_json(ledger.record), state="cancelling")
    ledger.write_move(cancelling.to_json(), ledger.version)
    record = asyncio.run(SlotMover(ledger, shards, SETTINGS).run(asyncio.Event()))
    assert record is not None and record.state == "cancelled"
    check_placed(ledger, shards)  # wherever the map stopped, rows follow it


def test_a_batch_of_a_wave_is_postponed() -> None:
    ledger, shards = grown()
    start_move(ledger)
    shards.due = SETTINGS.wave_threshold + 1
    stopping = asyncio.Event()

    async def briefly() -> MoveRecord | None:
        asyncio.get_running_loop().call_later(0.05, stopping.set)
        return await SlotMover(ledger, shards, replace(SETTINGS, postpone_seconds=0.01)).run(
            stopping
        )

    record = asyncio.run(briefly())
    assert record is not None and record.state == "running" and record.batch is None
    assert record.note and record.note.startswith("postponed")
    assert ledger.map.counts()[2] == 0 and not any(shards.fences[0].values())


def test_a_mover_that_lost_its_lock_touches_nothing() -> None:
    ledger, shards = grown()
    start_move(ledger)
    with pytest.raises(Conflict):
        asyncio.run(
            SlotMover(ledger, shards, SETTINGS, holds_lock=lambda: False).run(asyncio.Event())
        )
    assert shards.fences[0] == {} and shards.fences[1] == {}


def test_a_drain_empties_the_shard_and_a_rebalance_leaves_it_empty() -> None:
    ledger, shards = grown()
    start_move(ledger, "drain", 0)
    ledger.retired_shards = frozenset({0})
    asyncio.run(SlotMover(ledger, shards, SETTINGS).run(asyncio.Event()))
    assert ledger.map.counts()[0] == 0
    check_placed(ledger, shards)
    start_move(ledger)
    asyncio.run(SlotMover(ledger, shards, SETTINGS).run(asyncio.Event()))
    assert ledger.map.counts()[0] == 0 and sorted(ledger.map.counts()[1:]) == [2048, 2048]


def test_active_shards_leave_out_the_retired_and_the_drained() -> None:
    current = SlotMap.modulo(4)
    assert active_shards(current, "rebalance", None, frozenset({1})) == [0, 2, 3]
    assert active_shards(current, "drain", 3, frozenset({1})) == [0, 2]


def test_a_record_behind_the_map_is_never_rolled_back_past_the_flip() -> None:
    """A record that says 'copy' for a batch the map already flipped (written
    by a mover that lost its lock): a cancel finishes it instead of deleting
    the only serving copy."""
    ledger, shards = grown()
    start_move(ledger)
    shards.die_after = 5  # fence, barrier, copy, unfence B, (the map flips) fence A absent
    with pytest.raises(Died):
        asyncio.run(SlotMover(ledger, shards, SETTINGS).run(asyncio.Event()))
    assert ledger.record is not None
    behind = MoveRecord.from_json(ledger.record)
    assert behind.batch is not None and ledger.map.counts()[2] > 0  # flipped
    stale = replace(behind, state="cancelling", batch=behind.batch.at("copy"))
    ledger.write_move(stale.to_json(), ledger.version)
    record = asyncio.run(SlotMover(ledger, shards, SETTINGS).run(asyncio.Event()))
    assert record is not None and record.state == "cancelled"
    assert ledger.map.counts()[2] > 0
    check_placed(ledger, shards)
