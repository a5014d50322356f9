"""The versioned slot map: which shard holds each of the 4,096 slots.

Epoch 0 is ``slot % shard_count``, the rule every id issued so far was routed
by, so a cluster that never resharded keeps its routing unchanged. Each later
epoch moves slots between shards; the map is small (4,096 entries) and is kept
as runs of consecutive slots with one owner, which is also its wire form in
ZooKeeper (:meth:`SlotMap.to_json` / :meth:`SlotMap.from_json`).

The map routes; it does not fence. A process holding an old epoch may send a
write to the shard that held a slot before a move: the shard itself refuses it
(the ownership check inside each write transaction), so a stale map costs a
retry, never a duplicate.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["SLOTS", "Move", "SlotMap", "plan_moves"]

# Every id carries one of these slots in its 12 rand_a bits (see the package doc).
SLOTS = 4096


@dataclass(frozen=True, slots=True)
class Move:
    """One slot's move from ``source`` to ``target``."""

    slot: int
    source: int
    target: int


@dataclass(frozen=True)
class SlotMap:
    """Slot → shard at one epoch. ``shard_count`` counts the registered shards
    (``0..shard_count-1``); a shard may hold no slot (just added, or drained)."""

    epoch: int
    shard_count: int
    owners: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {self.epoch}")
        if not 1 <= self.shard_count <= SLOTS:
            raise ValueError(f"shard_count must be in 1..{SLOTS}, got {self.shard_count}")
        if len(self.owners) != SLOTS:
            raise ValueError(f"a slot map names {SLOTS} owners, got {len(self.owners)}")
        bad = next((s for s in self.owners if not 0 <= s < self.shard_count), None)
        if bad is not None:
            raise ValueError(f"shard {bad} is not registered (shard_count {self.shard_count})")

    @classmethod
    def modulo(cls, shard_count: int) -> SlotMap:
        """Epoch 0: the ``slot % shard_count`` rule of every cluster so far."""
        if not 1 <= shard_count <= SLOTS:
            raise ValueError(f"shard_count must be in 1..{SLOTS}, got {shard_count}")
        return cls(0, shard_count, tuple(slot % shard_count for slot in range(SLOTS)))

    def shard_of_slot(self, slot: int) -> int:
        return self.owners[slot]

    def shard_of(self, value: uuid.UUID) -> int:
        """The shard holding the id ``value`` (its slot is in its ``rand_a`` bits)."""
        return self.owners[(value.int >> 64) & 0xFFF]

    def serving(self) -> list[int]:
        """The shards that hold at least one slot, in order."""
        return sorted(set(self.owners))

    def slots_of(self, shard: int) -> list[int]:
        return [slot for slot, owner in enumerate(self.owners) if owner == shard]

    def counts(self) -> list[int]:
        """How many slots each registered shard holds, by shard number."""
        counts = [0] * self.shard_count
        for owner in self.owners:
            counts[owner] += 1
        return counts

    def with_shard(self) -> SlotMap:
        """The next epoch, with one more registered shard that holds no slot."""
        if self.shard_count == SLOTS:
            raise ValueError(f"a cluster has at most {SLOTS} shards")
        return SlotMap(self.epoch + 1, self.shard_count + 1, self.owners)

    def with_moves(self, moves: Iterable[Move]) -> SlotMap:
        """The next epoch, with ``moves`` applied. A move whose source is not
        the slot's owner is refused: it was planned against another epoch."""
        owners = list(self.owners)
        for move in moves:
            if owners[move.slot] != move.source:
                raise ValueError(
                    f"slot {move.slot} is on shard {owners[move.slot]}, not {move.source}"
                )
            if not 0 <= move.target < self.shard_count:
                raise ValueError(f"shard {move.target} is not registered")
            owners[move.slot] = move.target
        return SlotMap(self.epoch + 1, self.shard_count, tuple(owners))

    def runs(self) -> list[tuple[int, int, int]]:
        """``(first, last, shard)`` for each run of consecutive slots with one owner."""
        runs: list[tuple[int, int, int]] = []
        first = 0
        for slot in range(1, SLOTS + 1):
            if slot == SLOTS or self.owners[slot] != self.owners[first]:
                runs.append((first, slot - 1, self.owners[first]))
                first = slot
        return runs

    def to_json(self) -> bytes:
        body = {"epoch": self.epoch, "shards": self.shard_count, "runs": self.runs()}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> SlotMap:
        body = json.loads(data)
        owners = [-1] * SLOTS
        for first, last, shard in body["runs"]:
            for slot in range(first, last + 1):
                owners[slot] = shard
        if -1 in owners:
            raise ValueError(f"slot {owners.index(-1)} has no shard in the map")
        return cls(int(body["epoch"]), int(body["shards"]), tuple(owners))


def _quotas(counts: Sequence[int], active: Sequence[int]) -> dict[int, int]:
    """Each active shard's even share; the odd slots go to the shards that hold
    the most already, so the fewest slots move."""
    base, extra = divmod(SLOTS, len(active))
    by_size = sorted(active, key=lambda shard: (-counts[shard], shard))
    return {shard: base + (1 if i < extra else 0) for i, shard in enumerate(by_size)}


def plan_moves(current: SlotMap, active: Iterable[int]) -> list[Move]:
    """The fewest moves that give every ``active`` shard an even share and the
    others none (drain: leave a shard out of ``active``). Deterministic: the
    highest slots leave a shard first, so a rerun after a crash plans the
    remaining moves of the same plan."""
    chosen = sorted(set(active))
    if not chosen:
        raise ValueError("at least one shard must stay active")
    unknown = [shard for shard in chosen if not 0 <= shard < current.shard_count]
    if unknown:
        raise ValueError(f"shards {unknown} are not registered")
    counts = current.counts()
    quota = _quotas(counts, chosen)
    leaving: list[tuple[int, int]] = []  # (slot, source), in the order they leave
    for shard in range(current.shard_count):
        surplus = counts[shard] - quota.get(shard, 0)
        if surplus > 0:
            leaving.extend((slot, shard) for slot in current.slots_of(shard)[-surplus:])
    spots = [shard for shard in chosen for _ in range(max(0, quota[shard] - counts[shard]))]
    return [
        Move(slot, source, target) for (slot, source), target in zip(leaving, spots, strict=True)
    ]
