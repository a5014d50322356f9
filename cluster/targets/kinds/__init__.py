"""The target kinds this Vakit offers, registered.

A new kind is its module in this package (a :class:`TargetKind`: its
request-body model, its :class:`~cluster.targets.Target` or a lazy import of
it) and one line here; a kind from outside the package calls
``KINDS.register`` before the API is imported (tests/unit/echo_kind.py).
The API's request bodies and create check, the worker's targets, the
per-target limit keys and the CLI's target options all read :data:`KINDS`.
"""

from __future__ import annotations

from cluster.targets.kinds import http, kafka, noop
from cluster.targets.registry import TargetKinds

__all__ = ["KINDS"]

KINDS = TargetKinds(
    [
        http.KIND,
        kafka.KIND,
        noop.KIND,
    ]
)
