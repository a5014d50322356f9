"""For the services that receive firings: check that one was signed by
Vakit with the owner's secret (Standard Webhooks' scheme), and read it.

A firing carries ``webhook-id`` (its Idempotency-Key, the same on every
attempt of one occurrence), ``webhook-timestamp`` (Unix seconds when it was
sent) and ``webhook-signature``: space-separated ``v1,<base64>`` entries,
each the HMAC-SHA256 of ``"<id>.<timestamp>.<body>"`` under one of the
owner's secrets (two during a rotation). Secrets are written ``whsec_`` +
base64, or as plain text, exactly as the server's ``VAKIT_SIGNING_SECRETS``
holds them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vakit_client.errors import InvalidSignature
from vakit_client.models import parse_instant

__all__ = ["DEFAULT_TOLERANCE", "Firing", "verify_firing"]

# Seconds a firing's timestamp may be from the receiver's clock: a replayed
# old request is refused, and clocks a little apart still agree.
DEFAULT_TOLERANCE = 300.0


@dataclass(frozen=True)
class Firing:
    """A verified firing. ``idempotency_key`` is what to deduplicate on:
    store it in the same transaction as the firing's effect."""

    job_id: str
    type: str
    scheduled_for: datetime
    attempt: int
    payload: Any
    idempotency_key: str
    raw: dict[str, Any] = field(repr=False)
    run_at: datetime | None = None
    """When this attempt was due, where that is not ``scheduled_for``: a
    calendar moved the cron's run (the slot stays ``scheduled_for``), or a
    retry's backoff. None otherwise."""


def _key(secret: str) -> bytes:
    if secret.startswith("whsec_"):
        try:
            return base64.b64decode(secret[len("whsec_") :], validate=True)
        except binascii.Error as exc:
            raise ValueError("a whsec_ secret must be base64 after its prefix") from exc
    return secret.encode()


def _header(headers: Mapping[str, str], name: str) -> str:
    # Header names are case-insensitive; a plain dict from a framework may
    # hold either spelling.
    for key, value in headers.items():
        if key.lower() == name:
            return value
    raise InvalidSignature(f"the firing has no {name} header")


def verify_firing(
    body: bytes,
    headers: Mapping[str, str],
    secret: str | Sequence[str],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> Firing:
    """The firing in ``body`` if its signature verifies with ``secret`` (or
    any of several, during a rotation) and its timestamp is within
    ``tolerance`` seconds of ``now``; :class:`InvalidSignature` otherwise.

    ``body`` is the request body exactly as received (bytes, not re-encoded
    JSON): the signature covers those bytes."""
    msg_id = _header(headers, "webhook-id")
    stamp = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")
    try:
        sent = int(stamp)
    except ValueError:
        raise InvalidSignature(f"webhook-timestamp {stamp!r} is not Unix seconds") from None
    current = time.time() if now is None else now
    if abs(current - sent) > tolerance:
        raise InvalidSignature(
            f"webhook-timestamp is {current - sent:.0f} s from now (at most {tolerance:.0f})"
        )
    signed = f"{msg_id}.{stamp}.".encode() + body
    secrets = [secret] if isinstance(secret, str) else list(secret)
    expected = [
        base64.b64encode(hmac.new(_key(s), signed, hashlib.sha256).digest()).decode()
        for s in secrets
    ]
    given = [
        sig for version, _, sig in (e.partition(",") for e in signatures.split()) if version == "v1"
    ]
    if not any(hmac.compare_digest(g, e) for g in given for e in expected):
        raise InvalidSignature("no webhook-signature entry verifies with the secret given")
    doc = json.loads(body)
    scheduled_for = parse_instant(doc["scheduledFor"])
    assert scheduled_for is not None
    return Firing(
        job_id=doc["jobId"],
        type=doc["type"],
        scheduled_for=scheduled_for,
        attempt=doc["attempt"],
        payload=doc.get("payload"),
        idempotency_key=msg_id,
        raw=doc,
        run_at=parse_instant(doc["runAt"]) if "runAt" in doc else None,
    )
