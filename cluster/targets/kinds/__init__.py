"""The target kinds this Vakit offers, registered.

A new kind is its module in this package (a :class:`TargetKind`, and its
:class:`~cluster.targets.Target` or a lazy import of it) and one line here.
The API's create check, the worker's targets, the per-target limit keys and
the CLI's target options all read :data:`KINDS`.
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
