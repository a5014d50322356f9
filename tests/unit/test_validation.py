"""Request validation and the target address policy, without a server."""

from __future__ import annotations

import ipaddress
from datetime import UTC

import pytest
from pydantic import ValidationError

from cluster.api.schemas import CreateJobIn
from cluster.config import Settings
from cluster.instants import parse_instant
from cluster.targets.policy import AddressPolicy, TargetRefused
from cluster.worker.limits import parse_limits, target_key


def make(**over: object) -> CreateJobIn:
    body: dict[str, object] = {
        "type": "T",
        "runAt": "2026-12-01T10:00:00Z",
        "target": {"kind": "HTTP", "url": "https://a.example/x"},
    }
    body.update(over)
    return CreateJobIn.model_validate(body)


def test_defaults() -> None:
    job = make()
    assert job.maxAttempts == 5 and job.timeoutSeconds == 60 and job.payload is None


@pytest.mark.parametrize(
    "value",
    ["2026-12-01T10:00:00Z", "2026-12-01T10:00:00.123456789+03:00", "2026-12-01t10:00:00z", "2026-12-01 10:00:00-05:30"],
)
def test_rfc3339_accepted(value: str) -> None:
    assert parse_instant(value).utcoffset() is not None


@pytest.mark.parametrize(
    ("value", "instant"),
    [
        ("2026-12-01T10:00:00.123456789+03:00", "2026-12-01T07:00:00.123456+00:00"),  # nanoseconds dropped
        ("2026-12-01T10:00:00.1234567Z", "2026-12-01T10:00:00.123456+00:00"),
        ("2026-12-01t10:00:00.5z", "2026-12-01T10:00:00.500000+00:00"),
        ("2026-12-01 10:00:00.000001-05:30", "2026-12-01T15:30:00.000001+00:00"),
    ],
)
def test_rfc3339_fractions_to_the_microsecond(value: str, instant: str) -> None:
    assert parse_instant(value).astimezone(UTC).isoformat(timespec="microseconds") == instant


@pytest.mark.parametrize(
    "value", ["2026-12-01T10:00:00", "2026-12-01", "tomorrow", "2026-13-01T10:00:00Z", "2026-12-01T10:00Z", ""]
)
def test_rfc3339_refused(value: str) -> None:
    with pytest.raises(ValueError):
        parse_instant(value)


@pytest.mark.parametrize(
    "over",
    [
        {"maxAttempts": 0},
        {"maxAttempts": 101},
        {"timeoutSeconds": 86401},
        {"typo": 1},
        {"target": {"kind": "HTTP"}},
        {"target": {"kind": "KAFKA", "topic": "bad topic"}},
        {"runAt": 1764000000},
    ],
)
def test_model_refuses(over: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        make(**over)


def test_policy_default_refuses_private_and_metadata() -> None:
    policy = AddressPolicy.from_list([])
    assert policy.check_url("https://hooks.example.com/x") == "hooks.example.com"
    for url in ["http://127.0.0.1/", "http://10.0.0.1/", "http://[fe80::1]/", "http://169.254.169.254/",
                "http://localhost:8080/", "http://metadata.google.internal/", "http://0.0.0.0/"]:
        with pytest.raises(TargetRefused):
            policy.check_url(url)


def test_policy_allow_list() -> None:
    policy = AddressPolicy.from_list(["hooks.example.com", ".svc.internal", "192.168.5.0/24"])
    policy.check_url("https://hooks.example.com/")
    policy.check_url("http://billing.svc.internal/")
    policy.check_url("http://192.168.5.9:8080/")
    for url in ["https://other.example.com/", "http://192.168.6.1/", "http://127.0.0.1/"]:
        with pytest.raises(TargetRefused):
            policy.check_url(url)


def test_policy_private_allowed_still_refuses_metadata() -> None:
    policy = AddressPolicy.from_list([], allow_private=True)
    policy.check_url("http://127.0.0.1:9/")
    with pytest.raises(TargetRefused):
        policy.check_address(ipaddress.ip_address("169.254.169.254"))


def test_settings_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("VAKIT_SHARDS", "postgresql://a/x, postgresql://b/y")
    monkeypatch.setenv("VAKIT_API_TOKENS", "t1=orders,t2=billing")
    monkeypatch.setenv("VAKIT_HTTP_TARGET_ALLOW", "hooks.example.com,10.0.0.0/8")
    s = Settings()
    assert s.shards == ["postgresql://a/x", "postgresql://b/y"]
    assert s.api_tokens == {"t1": "orders", "t2": "billing"}
    policy = AddressPolicy.from_list(s.http_target_allow)
    assert policy.hosts == {"hooks.example.com"}
    assert [str(n) for n in policy.networks] == ["10.0.0.0/8"]


def test_token_roles_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Today's VAKIT_API_TOKENS keeps its meaning (tenants); operators have their own list.
    monkeypatch.setenv("VAKIT_API_TOKENS", "t1=orders")
    monkeypatch.setenv("VAKIT_OPERATOR_TOKENS", "op1=oncall")
    s = Settings()
    assert s.api_tokens == {"t1": "orders"} and s.operator_tokens == {"op1": "oncall"}
    monkeypatch.setenv("VAKIT_OPERATOR_TOKENS", "t1=oncall")
    with pytest.raises(ValidationError, match="both api_tokens and operator_tokens"):
        Settings()


def test_settings_from_toml_with_env_winning(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "vakit.toml"
    path.write_text('shards = ["postgresql://a/x"]\nclaim_batch = 250\nlease_seconds = 45\n')
    monkeypatch.setenv("VAKIT_CONFIG", str(path))
    monkeypatch.setenv("VAKIT_CLAIM_BATCH", "300")
    s = Settings()
    assert s.shards == ["postgresql://a/x"] and s.lease_seconds == 45 and s.claim_batch == 300


def test_settings_refuse_bad_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VAKIT_API_TOKENS", "no-equals-sign")
    with pytest.raises(ValidationError):
        Settings()


def test_limits_parse_and_key() -> None:
    limits = parse_limits({"Hooks.Example.com": "5/10", "kafka:orders": "100"})
    assert limits["hooks.example.com"].concurrency == 5 and limits["hooks.example.com"].rate == 10
    assert limits["kafka:orders"].rate is None
    assert target_key({"kind": "HTTP", "url": "https://Hooks.Example.com/x"}) == "hooks.example.com"
    assert target_key({"kind": "KAFKA", "topic": "orders"}) == "kafka:orders"
    with pytest.raises(ValueError):
        parse_limits({"x": "many"})


def test_private_allowed_with_an_allow_list_takes_private_literals_only() -> None:
    # The allow list narrows public destinations; allow_private opens the
    # private ones (what test clusters use to reach their loopback sinks).
    policy = AddressPolicy.from_list(["hooks.example.com"], allow_private=True)
    policy.check_url("http://127.0.0.1:9/fire")
    policy.check_url("http://10.1.2.3/")
    with pytest.raises(TargetRefused):
        policy.check_url("http://8.8.8.8/")
    with pytest.raises(TargetRefused):
        policy.check_url("http://169.254.169.254/")
