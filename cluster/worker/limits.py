"""Per-target limits as the operator configures them, and the key a job's
target is limited by.

Limits are set as ``key=concurrency[/rate[/burst]]`` (rate in firings per
second), e.g. ``VAKIT_TARGET_LIMITS="billing.internal=50/200,kafka:orders=100"``,
and hold for the whole cluster, however many workers run (issue 44,
docs/design/limits.md): each shard admits its share of a key's firings when it is
claimed (:mod:`cluster.worker.admission`, :mod:`cluster.model.limits`). A
job held back by a limit is not claimed: it stays SCHEDULED, cancellable.
"""

from __future__ import annotations

from collections.abc import Mapping

from cluster.model import parse_limits
from cluster.targets.kinds import KINDS

__all__ = ["parse_limits", "target_key"]


def target_key(target: Mapping[str, object]) -> str:
    """What a limit applies to: the HTTP host, ``kafka:<topic>``, as the
    target's kind says (cluster.targets.kinds); the database computes the
    same (``vakit_limit_key``, migration 24)."""
    return KINDS.limit_key(target)
