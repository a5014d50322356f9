"""The KAFKA kind: ``{"kind": "KAFKA", "topic", "key"?}``, produced by
:class:`cluster.targets.kafka.KafkaTarget`; offered when a Kafka cluster is
configured (``VAKIT_KAFKA_BOOTSTRAP``)."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Literal

from cluster.targets.registry import (
    CliOption,
    Spec,
    TargetCheck,
    TargetEnv,
    TargetKind,
    TargetSettings,
)

if TYPE_CHECKING:
    from cluster.targets import Target
    from cluster.targets.document import TargetDocument

__all__ = ["KIND"]


def _unavailable(settings: TargetSettings) -> str | None:
    if settings.kafka_bootstrap:
        return None
    return "no Kafka cluster is configured for this Vakit (VAKIT_KAFKA_BOOTSTRAP)"


def _build(env: TargetEnv) -> Target:
    # confluent-kafka is an optional extra (vakit[kafka]): imported only
    # where a Kafka cluster is configured.
    from cluster.targets.kafka import KafkaTarget

    bootstrap = env.settings.kafka_bootstrap
    assert bootstrap is not None  # offered only with one
    return KafkaTarget(bootstrap, scope=env.scope, signer=env.signer)


@cache
def _document() -> type[TargetDocument]:
    # pydantic is imported here, not with the kind: the CLI reads the kinds.
    from pydantic import Field

    from cluster.targets.document import TargetDocument

    class KafkaTargetIn(TargetDocument):
        kind: Literal["KAFKA"]
        topic: str = Field(
            pattern=r"^[A-Za-z0-9._-]{1,249}$",
            description="Starts with a prefix granted to the owner; names starting with '_', "
            "'.' and '..' are refused.",
        )
        key: str | None = Field(None, max_length=1024)

    return KafkaTargetIn


def _checker(env: TargetEnv) -> TargetCheck:
    scope = env.scope

    def check(spec: Spec, owner: str) -> None:
        scope.check_topic(owner, spec["topic"])

    return check


def _address(spec: Spec) -> str:
    return str(spec.get("topic"))


def _limit_key(topic: str) -> str:
    return f"kafka:{topic}"


KIND = TargetKind(
    name="KAFKA",
    build=_build,
    document=_document,
    unavailable=_unavailable,
    checker=_checker,
    address=_address,
    limit_key=_limit_key,
    cli_option=CliOption("--kafka-topic", "topic", "Kafka target topic (instead of --url)."),
)
