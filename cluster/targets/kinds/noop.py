"""The NOOP kind: ``{"kind": "NOOP"}``, which succeeds at once; for
benchmarks, offered only when enabled (``VAKIT_ENABLE_NOOP_TARGET``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster.targets.registry import TargetEnv, TargetKind, TargetSettings

if TYPE_CHECKING:
    from cluster.targets import Target

__all__ = ["KIND"]


def _unavailable(settings: TargetSettings) -> str | None:
    if settings.enable_noop_target:
        return None
    return "the NOOP target is for benchmarks and is disabled (VAKIT_ENABLE_NOOP_TARGET)"


def _build(env: TargetEnv) -> Target:
    from cluster.targets.noop import NoopTarget

    return NoopTarget()


KIND = TargetKind(name="NOOP", build=_build, unavailable=_unavailable)
