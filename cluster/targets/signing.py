"""Signed firings, in the style of Standard Webhooks.

Every firing carries ``webhook-id`` (its ``Idempotency-Key``: the same for
every attempt of one occurrence), ``webhook-timestamp`` (Unix seconds when
it was sent) and, when its owner has a secret, ``webhook-signature``:
``v1,<base64 of HMAC-SHA256(secret, "<id>.<timestamp>.<body>")>``, one such
entry per secret, separated by spaces. An owner with two secrets (a rotation
in progress) gets two signatures, and a receiver that knows either secret
accepts the firing. ``Vakit-Owner`` names the owner; a signature that
verifies with that owner's secret is what makes the name trustworthy.

Secrets are written ``whsec_<base64>`` (what the Standard Webhooks
libraries take; 32 random bytes is the usual size) or as plain text; either
way at least 16 bytes. The keyed hashes are prepared once per secret: a
firing costs one copy and one update of a prepared HMAC per secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping

__all__ = ["MIN_SECRET_BYTES", "Signer", "decode_secret", "sign"]

MIN_SECRET_BYTES = 16
_PREFIX = "whsec_"


def decode_secret(secret: str) -> bytes:
    """The key bytes of a secret: ``whsec_`` + base64, or the text itself."""
    if secret.startswith(_PREFIX):
        try:
            key = base64.b64decode(secret[len(_PREFIX) :], validate=True)
        except binascii.Error as exc:
            raise ValueError("a whsec_ secret must be base64 after its prefix") from exc
    else:
        key = secret.encode()
    if len(key) < MIN_SECRET_BYTES:
        raise ValueError(f"a signing secret must be at least {MIN_SECRET_BYTES} bytes")
    return key


def sign(key: bytes, msg_id: str, timestamp: str, body: bytes) -> str:
    """One ``v1,<base64>`` signature (the reference recipe; :class:`Signer`
    computes the same from prepared keys)."""
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


class Signer:
    """Per-owner secrets, keyed hashes prepared once."""

    def __init__(self, secrets: Mapping[str, Iterable[str]] | None = None) -> None:
        self._keys: dict[str, tuple[hmac.HMAC, ...]] = {}
        self._second, self._second_text = -1, ""
        for owner, owner_secrets in (secrets or {}).items():
            keys = tuple(
                hmac.new(decode_secret(s), digestmod=hashlib.sha256) for s in owner_secrets
            )
            if keys:
                self._keys[owner] = keys

    def signs(self, owner: str | None) -> bool:
        return owner in self._keys

    def headers(self, owner: str | None, msg_id: str, body: bytes) -> list[tuple[str, str]]:
        """The ``webhook-*`` headers of one firing (no signature for an
        owner without a secret)."""
        timestamp = self._timestamp()
        out = [("webhook-id", msg_id), ("webhook-timestamp", timestamp)]
        signature = self._signature(owner, msg_id, timestamp, body)
        if signature is not None:
            out.append(("webhook-signature", signature))
        return out

    def header_lines(self, owner: str | None, msg_id: str, body: bytes) -> str:
        """:meth:`headers` as HTTP/1.1 header lines (the HTTP target writes
        its request as text)."""
        timestamp = self._timestamp()
        lines = f"webhook-id: {msg_id}\r\nwebhook-timestamp: {timestamp}\r\n"
        signature = self._signature(owner, msg_id, timestamp, body)
        if signature is not None:
            lines += f"webhook-signature: {signature}\r\n"
        return lines

    def _timestamp(self) -> str:
        # A wave's firings share their second: formatted once per second.
        now = int(time.time())
        if now != self._second:
            self._second, self._second_text = now, str(now)
        return self._second_text

    def _signature(self, owner: str | None, msg_id: str, timestamp: str, body: bytes) -> str | None:
        keys = self._keys.get(owner) if owner is not None else None
        if not keys:
            return None
        signed = f"{msg_id}.{timestamp}.".encode()
        signatures = []
        for prepared in keys:
            h = prepared.copy()
            h.update(signed)
            h.update(body)
            signatures.append("v1," + base64.b64encode(h.digest()).decode())
        return " ".join(signatures)
