"""Configuration: environment variables ``VAKIT_…`` or a TOML file, same names.

The TOML file (``VAKIT_CONFIG`` or ``--config``) uses the names without the
prefix, lower-case (``shards = [...]``, ``api_tokens = "t=svc"``); environment
variables win over the file.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from cluster.targets.scope import DEFAULT_HEADER_DENY, Grant
from cluster.targets.signing import decode_secret

__all__ = ["Settings", "describe_invalid", "load_settings", "settings_in", "split_shards"]


def split_shards(value: Any) -> Any:
    """A shard list: a JSON or TOML list, or a string split on commas and
    newlines only. Spaces belong to a DSN (``host=a port=1 dbname=x`` is one
    shard); a DSN that itself holds a comma (several hosts) goes in a list."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.replace("\n", ",").split(",") if part.strip()]
    if isinstance(value, list | tuple):
        return [str(part).strip() for part in value]
    return value


def _split_list(value: Any) -> Any:
    """Accept a JSON list, a TOML list or a comma/whitespace separated string."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part for part in text.replace(",", " ").split() if part]
    return value


# Settings whose items hold secrets (a token, a signing key): an error names
# the item by its place, never by its text, which would reach logs; the
# benchmarks' reports say only that they were set.
SECRET_SETTINGS = frozenset({"api_tokens", "operator_tokens", "signing_secrets"})


def _shown(item: str, n: int, field: str | None) -> str:
    if field in SECRET_SETTINGS:
        return f"item {n} ({len(item)} characters, not shown: it holds a secret)"
    return repr(item)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="VAKIT_", extra="forbid")

    # -- shards and pools -------------------------------------------------
    shards: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="PostgreSQL DSNs, in shard order: a list, or one string split on commas "
        "and newlines (each DSN is checked by cluster.store.dsn when a process starts).",
    )
    pool_min_size: int = Field(1, ge=0)
    pool_max_size: int = Field(8, ge=1)
    connect_timeout: float = Field(5.0, gt=0, description="Seconds to wait for a connection.")
    statement_timeout: float = Field(
        10.0,
        gt=0,
        description="PostgreSQL's statement_timeout on every pool connection, in seconds. "
        "A worker's call to a shard that has not answered after this plus connect_timeout, "
        "pool wait included (a cut link, a frozen server), is abandoned: the worker backs "
        "off from that shard alone. The API's calls have api_shard_timeout.",
    )
    idle_in_transaction_timeout: float = Field(
        30.0,
        gt=0,
        description="PostgreSQL's idle_in_transaction_session_timeout, in seconds: a "
        "transaction left open by a process that hung releases its locks.",
    )
    api_shard_timeout: float = Field(
        2.5,
        gt=0,
        description="Seconds an API request waits on a shard for one operation, in all "
        "(the pool, the statements, a create's retry): a shard that answers nothing "
        "(frozen, cut off) costs a request this much, then a 503 with Retry-After. The "
        "workers and the API's background work keep statement_timeout + connect_timeout.",
    )
    tcp_keepalive_seconds: float = Field(
        10.0,
        ge=1,
        description="Idle seconds before TCP keepalive probes on shard connections; a "
        "link that drops silently is noticed about twice this later.",
    )

    # -- API ---------------------------------------------------------------
    api_tokens: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, description="Tenant tokens: token=owner_service,…"
    )
    operator_tokens: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="Operator tokens: token=name,… An operator reads /api/v1/cluster and "
        "/metrics and may act for any owner (?owner=); without ?owner= it acts as `name`.",
    )
    api_host: str = "127.0.0.1"
    api_port: int = Field(8080, ge=0, le=65535)
    max_payload_bytes: int = Field(64 * 1024, ge=1)
    api_max_concurrency: int = Field(
        256, ge=1, description="Requests served at once per API process; more get 429."
    )
    http_target_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Hosts and CIDRs that HTTP targets may reach; empty means any public host.",
    )
    allow_private_targets: bool = Field(
        False, description="Allow loopback, link-local and private addresses as targets."
    )
    target_grants: Annotated[dict[str, list[str]], NoDecode] = Field(
        default_factory=dict,
        description=(
            "Per owner, what its targets may reach: hosts, .domains, CIDRs (for literal "
            "addresses) and kafka:topic-prefixes; owner=a|b|kafka:p,… or a TOML table."
        ),
    )
    require_target_grants: bool = Field(
        False,
        description="Refuse HTTP (Kafka) targets to owners with no HTTP hosts (topic prefixes) granted.",
    )
    target_header_deny: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_HEADER_DENY),
        description="Headers target.headers may not set (case-insensitive; 'X-Forwarded-*' is a prefix).",
    )
    signing_secrets: Annotated[dict[str, list[str]], NoDecode] = Field(
        default_factory=dict,
        description=(
            "Per owner, the secrets firings are signed with (whsec_<base64> or text, >= 16 "
            "bytes); two during a rotation: owner=new|old,…"
        ),
    )
    enable_noop_target: bool = Field(False, description="Accept the NOOP target (benchmarks).")
    far_horizon_seconds: float = Field(3600.0, gt=0)
    api_metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Serve the API process's /metrics (no token) on metrics_host at this "
        "port; unset: only on the API port, to operator tokens.",
    )

    # -- per-owner limits (each API process; 0 turns one off) ------------------
    owner_create_rate: float = Field(
        1000.0, ge=0, description="Jobs and cron jobs an owner may create per second."
    )
    owner_create_burst: int = Field(
        10_000, ge=1, description="Creates an owner may make at once before the rate applies."
    )
    owner_max_pending_jobs: int = Field(
        10_000_000, ge=0, description="Jobs (scheduled or running) an owner may have pending."
    )
    owner_max_crons: int = Field(100_000, ge=0, description="Cron jobs an owner may define.")
    cron_triggers_per_minute: float | None = Field(
        None,
        ge=0,
        description="Manual triggers of one cron job per minute; default: one per "
        "cron_min_interval_seconds.",
    )
    quota_refresh_seconds: float = Field(
        30.0, gt=0, description="How often the pending-job and cron counts per owner are re-read."
    )

    # -- metrics labels ---------------------------------------------------------
    metrics_targets: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Targets (HTTP hosts, kafka:<topic>) with their own `target` label; "
        "the rest are `other` (target_limits' keys are declared too).",
    )
    metrics_crons: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description='Cron job ids with their own `cron` label, or ["*"] for all; the '
        "rest are `other`.",
    )

    # -- worker ------------------------------------------------------------
    worker_id: str | None = None
    metrics_port: int = Field(0, ge=0, le=65535, description="Worker /metrics port; 0 picks one.")
    metrics_host: str = "127.0.0.1"
    claim_batch: int = Field(100, ge=1, le=5000)
    max_inflight: int = Field(
        5000,
        ge=1,
        description=(
            "Jobs claimed and not finished, preloaded ones apart (they have "
            "preload_memory_bytes); when set, it bounds preloaded ones too."
        ),
    )
    poll_interval: float = Field(0.5, gt=0)
    # Most outcomes one completion statement writes. One statement per shard
    # is in flight at a time, and each durable commit waits for its WAL
    # flush: with one owner per shard, 500 rows a statement left a 100,000-job
    # wave's completions waiting on that chain (a COPYed NOOP wave, durable
    # shards, ZooKeeper: drain 27,400-30,200 jobs/s against 33,200-51,900 at
    # 2,000; a million-cron wave 15,883 against 26,159). Under light load a statement writes
    # what arrived within complete_linger, whatever this ceiling.
    complete_batch: int = Field(2000, ge=1)
    complete_linger: float = Field(0.005, ge=0)
    lease_seconds: float = Field(30.0, gt=0)
    lease_grace_seconds: float = Field(10.0, ge=0)
    heartbeat_interval: float | None = Field(None, gt=0, description="Default: lease / 3.")
    reaper_interval: float = Field(5.0, gt=0)
    prefetch_seconds: float = Field(
        1.0,
        ge=0,
        description="Claim jobs this far before due and fire each at its run_at.",
    )
    preload_memory_bytes: int = Field(
        256 * 1024 * 1024,
        ge=0,
        description=(
            "Memory for jobs preloaded ahead of a wave: a worker that sees more jobs due "
            "in an upcoming second than its regular claims can start on time claims its "
            "share early, up to this budget (0: no preloading)."
        ),
    )
    backoff_base: float = Field(5.0, gt=0)
    backoff_max: float = Field(3600.0, gt=0)
    stop_grace_seconds: float = Field(20.0, ge=0)
    http_pool_size: int = Field(200, ge=1)
    target_limits: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="host=concurrency[/rate[/burst]],…: limits for the whole cluster "
        "(docs/design/limits.md); `vakit limits` changes them at run time.",
    )

    kafka_bootstrap: str | None = Field(
        None, description="Kafka bootstrap servers for KAFKA targets; unset refuses them."
    )

    # -- coordination -----------------------------------------------------
    zk: str | None = Field(None, description="ZooKeeper connect string, optional /chroot.")
    zk_session_timeout: float = Field(10.0, gt=0)

    # -- cron ------------------------------------------------------------------
    cron_min_interval_seconds: float = Field(
        60.0, ge=60, description="Refuse schedules that fire more often than this."
    )
    cron_lookahead_seconds: float = Field(
        60.0, gt=0, description="Materialize slots this far ahead."
    )
    cron_misfire_threshold_seconds: float = Field(
        60.0, ge=0, description="A slot later than this is a misfire (policy applies)."
    )
    cron_catchup_cap: int = Field(
        100, ge=0, description="RUN_ALL runs at most this many missed slots."
    )
    cron_max_lookahead_seconds: float = Field(
        900.0,
        gt=0,
        description="How far ahead the materializer may start a large instant (a round hour "
        "shared by many crons) so that all of it exists before it is due.",
    )
    cron_page_size: int = Field(
        2000, ge=1, le=50_000, description="Due crons planned and written per statement."
    )
    cron_max_clock_skew_seconds: float = Field(
        30.0,
        gt=0,
        description="A materializer pass is refused when this process's clock and the "
        "shard's now() differ by more (a clock jump would misfire slots).",
    )
    cron_last_success_interval_seconds: float = Field(
        60.0, ge=0, description="How often the silent-cron gauge is refreshed from the shards."
    )
    materializer_interval: float = Field(5.0, gt=0)

    # -- resharding (the mover, cluster/resharding) ---------------------------
    # Slots moved together: their writes wait (503, Retry-After) for one batch's copy.
    reshard_batch_slots: int = Field(64, ge=1, le=4096)
    # How long the mover waits for transactions older than a fence on the source.
    reshard_barrier_timeout: float = Field(10.0, gt=0)
    # A batch is postponed while more than reshard_wave_threshold of its jobs
    # are due within reshard_wave_window seconds (a wave is not the time to move).
    reshard_wave_window: float = Field(60.0, ge=0)
    reshard_wave_threshold: int = Field(5000, ge=0)

    # -- housekeeping -------------------------------------------------------
    history_retention_days: int = Field(30, ge=1)

    # -- logs and traces ------------------------------------------------------
    log_level: str = Field(
        "info", pattern="(?i)^(debug|info|warning|error|critical)$", description="Log level."
    )
    tracing_exporter: str = Field(
        "none",
        pattern="(?i)^(none|otlp|console)$",
        description="OpenTelemetry traces: none (off), otlp (to OTEL_EXPORTER_OTLP_ENDPOINT) "
        "or console; needs the otel extra.",
    )
    tracing_sample_ratio: float = Field(
        1.0, ge=0, le=1, description="Share of new traces recorded (a caller's choice is kept)."
    )

    @field_validator("shards", mode="before")
    @classmethod
    def _shards(cls, value: Any) -> Any:
        return split_shards(value)

    @field_validator("http_target_allow", "metrics_targets", "metrics_crons", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("target_header_deny", mode="before")
    @classmethod
    def _header_list(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("target_grants", "signing_secrets", mode="before")
    @classmethod
    def _owner_lists(cls, value: Any, info: ValidationInfo) -> Any:
        """``owner=a|b,owner2=c``, a JSON object, or a TOML table whose
        values are lists (or ``a|b`` strings)."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("{"):
                value = json.loads(text)
            else:
                pairs: dict[str, Any] = {}
                for n, item in enumerate(_split_list(text), 1):
                    key, sep, val = item.partition("=")
                    if not sep or not key or not val:
                        raise ValueError(
                            f"expected owner=value|value, got {_shown(item, n, info.field_name)}"
                        )
                    pairs[key.strip()] = val.strip()
                value = pairs
        if isinstance(value, dict):
            return {
                owner: [p for p in items.split("|") if p] if isinstance(items, str) else items
                for owner, items in value.items()
            }
        return value

    @field_validator("target_grants")
    @classmethod
    def _check_grants(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for items in value.values():
            Grant.parse(items)
        return value

    @field_validator("signing_secrets")
    @classmethod
    def _check_secrets(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for owner, secrets in value.items():
            if not 1 <= len(secrets) <= 2:
                raise ValueError(f"{owner}: one secret, or two during a rotation")
            for secret in secrets:
                decode_secret(secret)
        return value

    @field_validator("api_tokens", "operator_tokens", "target_limits", mode="before")
    @classmethod
    def _pairs(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            pairs: dict[str, str] = {}
            for n, item in enumerate(_split_list(value), 1):
                key, sep, val = item.partition("=")
                if not sep or not key or not val:
                    raise ValueError(f"expected name=value, got {_shown(item, n, info.field_name)}")
                pairs[key.strip()] = val.strip()
            return pairs
        return value

    @field_validator("http_target_allow")
    @classmethod
    def _check_allow(cls, value: list[str]) -> list[str]:
        for item in value:
            if "/" in item:
                ipaddress.ip_network(item, strict=False)
        return value

    @model_validator(mode="after")
    def _one_role_per_token(self) -> Settings:
        both = self.api_tokens.keys() & self.operator_tokens.keys()
        if both:
            raise ValueError("a token is in both api_tokens and operator_tokens; give it one role")
        return self

    @property
    def shard_count(self) -> int:
        return len(self.shards)

    @property
    def triggers_per_minute(self) -> float:
        """Manual triggers of one cron per minute: the setting, or one per
        cron_min_interval_seconds (what the cron's own schedule may do)."""
        if self.cron_triggers_per_minute is not None:
            return self.cron_triggers_per_minute
        return 60.0 / self.cron_min_interval_seconds

    @property
    def heartbeat_every(self) -> float:
        return self.heartbeat_interval or self.lease_seconds / 3

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = os.environ.get("VAKIT_CONFIG")
        if path:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(path)))
        return tuple(sources)


def load_settings(config_file: str | None = None, **overrides: Any) -> Settings:
    """Settings from the environment, then ``config_file`` (or ``VAKIT_CONFIG``)."""
    if config_file:
        os.environ["VAKIT_CONFIG"] = config_file
    return Settings(**overrides)


def describe_invalid(exc: Exception) -> str:
    """One line that names each bad variable and why: pydantic's errors as
    ``VAKIT_NAME: message``, anything else by its first line."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return "; ".join(
            f"VAKIT_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()
        )
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def settings_in(env: Mapping[str, str]) -> Settings:
    """The settings a process started with exactly ``env`` would load (its
    ``VAKIT_CONFIG`` file included); raises what that process would.

    ``vakit up`` checks its children's configuration with it before it starts
    anything. pydantic-settings reads ``os.environ`` only, so the environment
    is swapped for the call: a caller does this before it starts threads.
    """
    with _environment(env):
        return Settings()
