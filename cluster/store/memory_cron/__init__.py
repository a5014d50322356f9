"""Cron definitions and occurrences in memory, beside :class:`MemStore`.

The :class:`~cluster.store.base.CronStore` contract with the semantics of
:mod:`cluster.store.postgres_cron` and its named queries: a cron's
occurrences become jobs of the :class:`MemStore` it wraps (so a worker over
that store runs them), one per (cron_id, scheduled_for) ever, written only
when the compare-and-set on ``next_fire_at`` wins. Time is the store's
injected clock. ``tests/contract/test_cron_store_contract.py`` runs the
same cases against both. Not for production: nothing is durable. One
module per role contract (:mod:`.intake`, :mod:`.upkeep`) over :mod:`.crons`.

Known difference: a MemStore job carries no concurrency policy or starting
deadline (its records have no such fields), so a worker over the memory
store neither skips late occurrences nor revokes replaced ones.
"""

from __future__ import annotations

from cluster.store.memory_cron.intake import MemCronIntake
from cluster.store.memory_cron.upkeep import MemCronUpkeep

__all__ = ["MemCronStore"]


class MemCronStore(MemCronIntake, MemCronUpkeep):
    """:class:`~cluster.store.base.CronStore` over a :class:`MemStore`'s shards."""
