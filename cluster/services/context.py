"""What the services need of the process that runs them: storage, time,
the shard map, the owner limits and the target and payload checks.

A structural protocol: the API's ``ApiContext`` is one (it holds the
tokens, too, which no service reads); a test or a local tool may pass
any object with these members.
"""

from __future__ import annotations

from typing import Any, Protocol

import shardmap
from cluster.clock import Clock
from cluster.config import Settings
from cluster.services.quotas import OwnerLimits
from cluster.store.contracts.api import ApiJobStore
from cluster.store.contracts.cron_intake import CronIntake

__all__ = ["Services"]


class Services(Protocol):
    # Read-only to the services (properties: any subtype will do).
    @property
    def settings(self) -> Settings: ...
    @property
    def store(self) -> ApiJobStore: ...
    @property
    def crons(self) -> CronIntake: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def shards(self) -> shardmap.SlotMap: ...
    @property
    def limits(self) -> OwnerLimits: ...
    @property
    def keys_in_flight(self) -> set[tuple[str, str]]:
        """(owner, Idempotency-Key) of the keyed creates this process is serving."""

    def check_target(self, target: dict[str, Any], owner: str) -> None:
        """Refuse (422) a target the deployment refuses or does not grant ``owner``."""

    def check_payload(self, payload: Any) -> None:
        """Refuse (413) a payload over the configured size."""
