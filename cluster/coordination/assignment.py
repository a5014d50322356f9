"""Shard ownership as a pure function of the live member ids.

Every worker computes the same map from the same member list, so no lock
protocol is needed: ownership is only a hint (DESIGN.md, invariant 7).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

__all__ = ["assign_shards"]

_T = TypeVar("_T", bound=Hashable)
_B = TypeVar("_B", bound=Hashable)


def _score(member_id: str, shard: int) -> bytes:
    # A stable hash (never Python's hash()): every process must rank alike.
    return hashlib.blake2b(f"{member_id}\0{shard}".encode(), digest_size=8).digest()


def _spread(
    items: Sequence[_T], bins: Sequence[_B], rank: Callable[[_T, _B], bytes]
) -> dict[_T, _B]:
    """Place each item in one bin, bin loads differing by at most one.

    Each item goes to its best-ranked bin that still has room (rendezvous
    hashing with a capacity), so a membership change moves few items rather
    than reshuffling all of them as ``i % n`` would. Needs ``len(items) >=
    len(bins)`` for every bin to get at least one item.
    """
    base, extra = divmod(len(items), len(bins))
    load = dict.fromkeys(bins, 0)
    placement: dict[_T, _B] = {}
    for item in items:
        for candidate in sorted(bins, key=lambda b: rank(item, b)):
            if load[candidate] < base or (load[candidate] == base and extra > 0):
                if load[candidate] == base:
                    extra -= 1
                load[candidate] += 1
                placement[item] = candidate
                break
    return placement


def assign_shards(member_ids: Sequence[str], shard_count: int) -> dict[str, frozenset[int]]:
    """Which shards each live member owns. Pure and deterministic.

    * Every shard has at least one owner while any member is alive.
    * At most as many members as shards: each shard has exactly one owner and
      members own ``shard_count // n`` or one more shard.
    * More members than shards: each member owns exactly one shard and every
      shard gets a group of owners whose sizes differ by at most one.
    """
    if shard_count < 1:
        raise ValueError(f"shard_count must be at least 1, got {shard_count}")
    members = sorted(set(member_ids))
    if not members:
        return {}
    shards = list(range(shard_count))
    owned: dict[str, set[int]] = {m: set() for m in members}
    if len(members) <= shard_count:
        for shard, member in _spread(shards, members, lambda s, m: _score(m, s)).items():
            owned[member].add(shard)
    else:
        for member, shard in _spread(members, shards, _score).items():
            owned[member].add(shard)
    return {m: frozenset(s) for m, s in owned.items()}
