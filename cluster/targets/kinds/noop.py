"""The NOOP kind: ``{"kind": "NOOP"}``, which succeeds at once; for
benchmarks, offered only when enabled (``VAKIT_ENABLE_NOOP_TARGET``)."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Literal

from cluster.targets.registry import TargetEnv, TargetKind, TargetSettings

if TYPE_CHECKING:
    from cluster.targets import Target
    from cluster.targets.document import TargetDocument

__all__ = ["KIND"]


def _unavailable(settings: TargetSettings) -> str | None:
    if settings.enable_noop_target:
        return None
    return "the NOOP target is for benchmarks and is disabled (VAKIT_ENABLE_NOOP_TARGET)"


def _build(env: TargetEnv) -> Target:
    from cluster.targets.noop import NoopTarget

    return NoopTarget()


@cache
def _document() -> type[TargetDocument]:
    # pydantic is imported here, not with the kind: the CLI reads the kinds.
    from cluster.targets.document import TargetDocument

    class NoopTargetIn(TargetDocument):
        kind: Literal["NOOP"]

    return NoopTargetIn


KIND = TargetKind(name="NOOP", build=_build, document=_document, unavailable=_unavailable)
