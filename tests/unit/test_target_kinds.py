"""The target registry: every decision taken per kind comes from its description."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import click
import pytest

from cluster.config import Settings
from cluster.model import ClaimedJob
from cluster.targets import FireResult, Target
from cluster.targets.document import TargetDocument
from cluster.targets.http import HttpTarget
from cluster.targets.kinds import KINDS
from cluster.targets.noop import NoopTarget
from cluster.targets.policy import TargetRefused
from cluster.targets.registry import CliOption, TargetEnv, TargetKind, TargetKinds, TargetSettings
from cluster.worker.limits import target_key


def settings(**over: Any) -> Settings:
    base: dict[str, Any] = {"shards": ["mem-0"], "http_target_allow": ["hooks.example.com"]}
    base.update(over)
    return Settings(**base)


def refusal(env: TargetEnv, spec: Mapping[str, Any], owner: str = "svc") -> TargetRefused:
    with pytest.raises(TargetRefused) as info:
        KINDS.checker(env)(spec, owner)
    return info.value


def test_the_built_in_kinds_in_order() -> None:
    assert KINDS.names() == ("HTTP", "KAFKA", "NOOP")
    with pytest.raises(ValueError, match="'HTTP' is registered twice"):
        TargetKinds([*KINDS, KINDS.get("HTTP")])  # type: ignore[list-item]


def test_kinds_not_offered_are_refused_on_target_kind() -> None:
    env = TargetEnv.from_settings(settings())
    noop = refusal(env, {"kind": "NOOP"})
    assert (str(noop), noop.field) == (
        "the NOOP target is for benchmarks and is disabled (VAKIT_ENABLE_NOOP_TARGET)",
        "target.kind",
    )
    kafka = refusal(env, {"kind": "KAFKA", "topic": "orders"})
    assert (str(kafka), kafka.field) == (
        "no Kafka cluster is configured for this Vakit (VAKIT_KAFKA_BOOTSTRAP)",
        "target.kind",
    )
    unknown = refusal(env, {"kind": "SMOKE"})
    assert unknown.field == "target.kind" and "SMOKE" in str(unknown)


def test_offered_kinds_run_their_own_checks() -> None:
    env = TargetEnv.from_settings(
        settings(
            enable_noop_target=True,
            kafka_bootstrap="localhost:9092",
            target_grants={"svc": ["hooks.example.com", "kafka:orders."]},
            require_target_grants=True,
        )
    )
    check = KINDS.checker(env)
    check({"kind": "NOOP"}, "svc")
    check({"kind": "HTTP", "url": "https://hooks.example.com/x"}, "svc")
    check({"kind": "HTTP", "url": "https://hooks.example.com/x"}, "svc")  # the remembered URL
    check({"kind": "KAFKA", "topic": "orders.paid"}, "svc")
    assert refusal(env, {"kind": "HTTP", "url": "https://evil.example.net/"}).field == "target.url"
    header = refusal(
        env, {"kind": "HTTP", "url": "https://hooks.example.com/x", "headers": {"Authorization": "x"}}
    )
    assert "Authorization" in str(header)
    assert refusal(env, {"kind": "KAFKA", "topic": "billing.paid"}).field == "target.topic"
    # A URL accepted for one owner is not thereby accepted for another.
    assert refusal(env, {"kind": "HTTP", "url": "https://hooks.example.com/x"}, "other")


async def test_the_worker_gets_one_target_per_offered_kind() -> None:
    plain = KINDS.build(TargetEnv.from_settings(settings()))
    assert list(plain) == ["HTTP"] and isinstance(plain["HTTP"], HttpTarget)
    both = KINDS.build(TargetEnv.from_settings(settings(enable_noop_target=True)))
    assert list(both) == ["HTTP", "NOOP"] and isinstance(both["NOOP"], NoopTarget)
    for target in [*plain.values(), *both.values()]:
        await target.close()


def test_limit_keys_as_before() -> None:
    assert target_key({"kind": "HTTP", "url": "https://Hooks.Example.com:8443/x"}) == "hooks.example.com"
    assert target_key({"kind": "HTTP", "url": "not a url"}) == ""
    assert target_key({"kind": "KAFKA", "topic": "orders"}) == "kafka:orders"
    assert target_key({"kind": "NOOP"}) == "noop"
    assert target_key({"kind": "SMOKE"}) == "smoke"
    assert target_key({}) == "none"
    assert KINDS.address({"kind": "HTTP", "url": "https://h/x"}) == "https://h/x"
    assert KINDS.address({"kind": "KAFKA", "topic": "t"}) == "t"
    assert KINDS.address({"kind": "NOOP"}) == KINDS.address({"kind": "SMOKE"}) == ""


def test_the_cli_names_targets_by_the_registered_options() -> None:
    from cluster.cli_client.crons import _target_from_flags

    flags = {"url": None, "kafka_topic": "orders"}
    assert _target_from_flags(flags) == {"kind": "KAFKA", "topic": "orders"}
    assert _target_from_flags({"url": "https://h/x", "kafka_topic": None}) == {
        "kind": "HTTP",
        "url": "https://h/x",
    }
    for both_or_none in ({"url": "u", "kafka_topic": "t"}, {"url": None, "kafka_topic": None}):
        with pytest.raises(click.UsageError, match=r"^give one target: --url or --kafka-topic$"):
            _target_from_flags(both_or_none)


class _LogTarget:
    """A kind that is not built in: records what it fires."""

    kind = "LOG"
    enforces_timeout = True

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    async def fire(self, job: ClaimedJob, job_id: str, timeout: float) -> FireResult:
        return FireResult.success()

    async def close(self) -> None:
        return None


def test_a_new_kind_is_its_description_and_one_registration() -> None:
    def build(env: TargetEnv) -> Target:
        return _LogTarget(env.settings.kafka_bootstrap or "-")

    def unavailable(s: TargetSettings) -> str | None:
        return None if s.enable_noop_target else "LOG needs the NOOP switch"

    def checker(env: TargetEnv) -> Any:
        def check(spec: Mapping[str, Any], owner: str) -> None:
            if not str(spec.get("stream", "")).startswith(owner):
                raise TargetRefused(f"stream must start with {owner}", field="target.stream")

        return check

    class LogTargetIn(TargetDocument):
        kind: Literal["LOG"]
        stream: str

    log = TargetKind(
        name="LOG",
        build=build,
        document=lambda: LogTargetIn,
        unavailable=unavailable,
        checker=checker,
        address=lambda spec: str(spec.get("stream")),
        limit_key=lambda stream: f"log:{stream}",
        cli_option=CliOption("--log-stream", "stream", "LOG target stream."),
    )
    kinds = TargetKinds([*KINDS, log])
    on = TargetEnv.from_settings(settings(enable_noop_target=True))
    assert isinstance(kinds.build(on)["LOG"], _LogTarget)
    assert "LOG" not in kinds.build(TargetEnv.from_settings(settings()))
    kinds.checker(on)({"kind": "LOG", "stream": "svc.audit"}, "svc")
    with pytest.raises(TargetRefused, match="stream must start with svc"):
        kinds.checker(on)({"kind": "LOG", "stream": "x"}, "svc")
    assert kinds.limit_key({"kind": "LOG", "stream": "svc.audit"}) == "log:svc.audit"
    assert [kind for kind, _ in kinds.cli_options()] == ["HTTP", "KAFKA", "LOG"]
