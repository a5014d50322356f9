"""The slot mover's contract: what moving slots between shards asks of a
shard's database (issue 42, docs/design/resharding.md) (STYLE.md item 17).

The mover fences slots on the shard that holds them, waits out the
transactions that began before the fence, copies the slots' rows to their
new shard, and cleans them off the old one. Every step is idempotent, so a
mover killed at any point runs it again. History and the attempt log stay
where they were written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cluster.store.contracts.sharded import Sharded

__all__ = ["FENCE_STATES", "MOVABLE_TABLES", "SlotMoves"]

# Why a shard does not serve a slot: it is being moved off it, another
# shard owns it (a shard added later starts with every slot absent), or a
# move copied its rows here and has not flipped it yet.
FENCE_STATES = ("moving", "absent", "copied")

# The tables whose rows go with their slot, in copy order (a slot's cron
# before its occurrences, a key's job before the key); history and the
# attempt log stay.
MOVABLE_TABLES = ("cron_jobs", "cron_occurrences", "jobs_far", "jobs", "job_keys")


class SlotMoves(Sharded, Protocol):
    """A shard's part in moving slots. Implementations raise only
    :mod:`cluster.errors` exceptions (and :class:`TimeoutError` from the
    barrier)."""

    async def fence_slots(self, shard: int, slots: Sequence[int], state: str) -> None:
        """Mark ``slots`` as ``state`` (one of :data:`FENCE_STATES`) on
        ``shard``, committed on return: from then on no write for them
        starts there (a write the API asked for is refused with
        :class:`~cluster.errors.SlotMoving`, the claims and the leader's
        passes skip them)."""
        ...

    async def unfence_slots(self, shard: int, slots: Sequence[int]) -> None:
        """``shard`` serves ``slots`` again (it owns them)."""
        ...

    async def fenced_slots(self, shard: int) -> dict[int, str]:
        """The slots ``shard`` does not serve, with their state."""
        ...

    async def wait_for_older_transactions(self, shard: int, timeout: float) -> None:
        """Return once every transaction on ``shard`` that began before this
        call has ended (after a fence commits: no write that missed it can
        still commit). :class:`TimeoutError` after ``timeout`` seconds."""
        ...

    async def copy_slots(self, source: int, target: int, slots: Sequence[int]) -> dict[str, int]:
        """Copy the rows of ``slots`` in :data:`MOVABLE_TABLES` from
        ``source`` to ``target`` as they are (a RUNNING job with its
        attempt, lease and worker), in one transaction on ``target`` that
        also fences the slots ``copied`` there: all or nothing. A copy run
        again after its commit copies nothing. Returns the rows copied per
        table. ``source`` must have the slots fenced (their rows must not
        change under the copy), ``target`` must not serve them."""
        ...

    async def discard_copy(self, shard: int, slots: Sequence[int]) -> dict[str, int]:
        """Undo :meth:`copy_slots` on ``shard`` (the target of a batch rolled
        back): the slots' rows deleted and the slots fenced ``absent``, in
        one transaction. Returns the rows deleted per table."""
        ...

    async def delete_slots(self, shard: int, slots: Sequence[int]) -> dict[str, int]:
        """Delete the rows of ``slots`` in :data:`MOVABLE_TABLES` from
        ``shard`` (the source, after the flip), in one transaction; returns
        the rows deleted per table."""
        ...

    async def slot_rows(self, shard: int, slots: Sequence[int] | None = None) -> dict[str, int]:
        """Rows per table of :data:`MOVABLE_TABLES` on ``shard``, of
        ``slots`` (all rows when None)."""
        ...

    async def index_slots(self, shard: int, present: bool) -> None:
        """Build (``present``) or drop the move's slot indexes on ``shard``:
        while a shard gives slots away its movable tables are indexed by
        slot, so a batch's copy and delete read its rows, not the table. The
        index costs every write a little, so it lives only while moving."""
        ...

    async def due_within(self, shard: int, slots: Sequence[int], seconds: float) -> int:
        """Jobs of ``slots`` on ``shard`` due within ``seconds`` of the
        database's clock (near and far, not paused), and crons of them due
        to fire by then (each one a job to be): the wave check before a
        move."""
        ...
