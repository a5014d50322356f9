"""The create-time checks of what a job or a cron carries: its target
(offered by this deployment, allowed by its address policy, granted to the
owner) and the size of its payload.

A refusal here is a 4xx that changes nothing, instead of a failed firing
later. The API's context holds one :class:`CreateChecks` (its
``check_target`` and ``check_payload`` are these); a local tool or a test
may hold its own.
"""

from __future__ import annotations

from typing import Any

from cluster.config import Settings
from cluster.errors import InvalidRequest, PayloadTooLarge
from cluster.model.jsontext import json_bytes
from cluster.targets.kinds import KINDS
from cluster.targets.policy import TargetRefused
from cluster.targets.registry import TargetEnv

__all__ = ["CreateChecks"]


class CreateChecks:
    """The target and payload checks of one deployment, set up once per
    process: each kind's check may cache (HTTP remembers accepted URLs)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # The address policy, the owners' grants and the signing keys every
        # kind's check shares (cluster.targets.registry).
        self.targets = TargetEnv.from_settings(settings)
        self._check_target = KINDS.checker(self.targets)

    def check_target(self, target: dict[str, Any], owner: str) -> None:
        """Targets this deployment refuses, or does not grant ``owner``, are
        a 422 at create time, not a failure at firing time."""
        try:
            self._check_target(target, owner)
        except TargetRefused as exc:
            raise InvalidRequest(str(exc), field=exc.field) from exc

    def check_payload(self, payload: Any) -> None:
        """A payload over the configured size is a 413."""
        limit = self.settings.max_payload_bytes
        size = len(json_bytes(payload))
        if size > limit:
            raise PayloadTooLarge(
                f"payload is {size} bytes; the limit is {limit}",
                size=size,
                limit=limit,
                field="payload",
            )
