"""The JSON text of what jobs carry: payloads, targets, the API's answers.

orjson does it in a tenth of ``json.dumps``' CPU, which counts on the create
path (a batch of 1,000 jobs encodes several values a job). Where orjson
refuses a value ``json`` takes (an integer past 64 bits), ``json`` encodes it,
so nothing that was accepted before is refused now. orjson writes NaN and
infinities as ``null``; the API refuses them on input (strict JSON), so none
reaches here from a request.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["canonical_json", "json_bytes", "json_text"]

_FALLBACK = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
# What orjson writes otherwise than ``json`` in ASCII output: a float under
# 1e-4 ("0.00001" against "1e-05", "1e-6" against "1e-06"; larger ones and
# positive exponents are written alike) and DEL, which ``json`` escapes.
# Found anywhere (in a string too), ``json`` writes the value.
_TINY_EXPONENT = re.compile(rb"[0-9]e-")


def json_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON of ``value``."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return _FALLBACK.encode(value).encode()


def json_text(value: Any) -> str:
    """:func:`json_bytes` as ``str`` (PostgreSQL text parameters)."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return _FALLBACK.encode(value)


def canonical_json(value: Any) -> bytes:
    """Exactly ``json.dumps(value, sort_keys=True, separators=(",", ":"))``,
    encoded: the recipe of stored digests (idempotency fingerprints), which
    must never change. orjson writes the same bytes whenever its output is
    ASCII with none of those, about ten times faster; anything else
    (non-ASCII text, which ``json`` escapes, a tiny float, an integer past
    64 bits) is written by ``json`` itself. The property test holds the two
    to the same bytes."""
    try:
        fast = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return _CANONICAL.encode(value).encode()
    # Substring tests first (a regular expression without a literal prefix
    # is tried at every byte: four times the cost of orjson itself).
    if fast.isascii() and b"\x7f" not in fast and b"0.0000" not in fast:
        if b"e-" not in fast or _TINY_EXPONENT.search(fast) is None:
            return fast
    return _CANONICAL.encode(value).encode()
