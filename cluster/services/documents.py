"""The documents a job's target and a time are written in, as users write
them (the API's request bodies, a crons-as-code file), and their
validation: pydantic, no web framework, so the CLI reads a file with the
rules the server applies.

Times must be RFC 3339 with an offset; limits are checked here so that bad
input is a 4xx that changes nothing.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "EARLIEST",
    "LATEST",
    "HttpTargetIn",
    "KafkaTargetIn",
    "NoopTargetIn",
    "Rfc3339",
    "Strict",
    "TargetIn",
    "format_utc",
    "parse_rfc3339",
    "target_dict",
]

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)


def parse_rfc3339(value: str, name: str = "time") -> datetime:
    """RFC 3339 with a mandatory offset; naive or vague times are refused."""
    if isinstance(value, str):
        # The validator parses runAt, then the handler needs the datetime:
        # the second parse of the same text is a cache hit.
        return _parse_rfc3339(value, name)
    raise ValueError(
        f"{name} must be an RFC 3339 timestamp with an offset, e.g. 2026-10-23T14:30:00Z"
    )


@lru_cache(maxsize=1024)
def _parse_rfc3339(value: str, name: str) -> datetime:
    match = _RFC3339.match(value)
    if not match:
        raise ValueError(
            f"{name} must be an RFC 3339 timestamp with an offset, e.g. 2026-10-23T14:30:00Z"
        )
    text = value.replace("z", "Z").replace("t", "T")
    fraction = match.group(1)
    if fraction is not None and len(fraction) > 7:
        # Python parses at most 6 fractional digits: drop the nanoseconds.
        text = text.replace(fraction, fraction[:7], 1)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{name} is not a valid date and time: {value!r}") from exc
    # Compared as aware instants (no arithmetic, so no OverflowError):
    # 0001-01-01T00:30+01:00 is before year 1 in UTC, and every later step
    # (to UTC, + a horizon, a cron's next slot) would overflow.
    if not EARLIEST <= parsed < LATEST:
        raise ValueError(
            f"{name} must be from {format_utc(EARLIEST)} and before {format_utc(LATEST)}"
        )
    return parsed


# The instants the API accepts: later steps add hours or years to them.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


Rfc3339 = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


def format_utc(value: datetime) -> str:
    """Times leave the API in UTC with a ``Z``, whatever the database session's zone."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


# Unknown fields are refused: a typo such as ``maxAttempt`` must not be
# silently ignored. (No docstring: it would describe every model in OpenAPI.)
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=False)


class HttpTargetIn(Strict):
    kind: Literal["HTTP"]
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="An absolute http(s) URL, ASCII, its host among those granted to the "
        "owner; addresses that are not public are refused unless the operator allows them.",
    )
    headers: dict[str, str] | None = Field(
        None,
        description="Extra request headers. Credentials, hop-by-hop and forwarding headers "
        "(the operator's deny list), Vakit-* and Webhook-* are refused.",
    )

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return value
        if len(value) > 20:
            raise ValueError("at most 20 extra headers")
        for name, val in value.items():
            if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", name):
                raise ValueError(f"invalid header name {name!r}")
            if len(val) > 1024 or "\r" in val or "\n" in val:
                raise ValueError(f"invalid value for header {name!r}")
        # Which names may be set is the operator's and Vakit's choice
        # (cluster.targets.scope), checked with the owner's grants.
        return value


class KafkaTargetIn(Strict):
    kind: Literal["KAFKA"]
    topic: str = Field(
        pattern=r"^[A-Za-z0-9._-]{1,249}$",
        description="Starts with a prefix granted to the owner; names starting with '_', "
        "'.' and '..' are refused.",
    )
    key: str | None = Field(None, max_length=1024)


class NoopTargetIn(Strict):
    kind: Literal["NOOP"]


TargetIn = Annotated[HttpTargetIn | KafkaTargetIn | NoopTargetIn, Field(discriminator="kind")]


def target_dict(target: HttpTargetIn | KafkaTargetIn | NoopTargetIn) -> dict[str, Any]:
    """``target.model_dump(exclude_none=True)``: the fields that are set, in
    their order. Every create makes one (1,000 a batch), and model_dump's
    dozen keyword arguments cost 1.0 us where the fields' own dict costs 0.4;
    a target's fields are plain values (a headers dict, no models inside)."""
    return {name: value for name, value in target.__dict__.items() if value is not None}
