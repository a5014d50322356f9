"""Strict JSON: what a request body may hold beyond what the JSON grammar allows.

Python's ``json`` and pydantic's parser accept ``NaN`` and ``Infinity`` (not
JSON at all), turn ``1e999`` into an infinity, and keep ``\\u0000`` and lone
surrogates in strings; none of them can be stored (PostgreSQL's ``jsonb``
refuses the first and the last, the encoder the rest) and each used to be a
500. The rule is I-JSON's (RFC 7493): UTF-8 text, no lone surrogates, numbers
a double can hold, and no NUL character, which no text column accepts.

The check is on the raw bytes, once per request, for every route, before
anything is parsed or written. Almost every body holds none of the tokens
that can break a rule, and one regular-expression search over the bytes
says so; only a body that holds one is parsed again to find out exactly
where (a ``\\ud83d\\ude00`` pair, a key named ``NaN`` in a string, are fine).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["StrictJsonError", "check_body", "check_query"]

# The screen: anything that may break a rule survives this translation as
# one of five literal byte strings, and a substring search (memchr fast)
# finds each. Every digit becomes 9 and E becomes e, + and - are dropped (an
# exponent of three digits is then 9e999, a number beyond a double's digits
# 9 * 300), a NUL byte becomes a backslash (as every escape starts). A
# regular expression doing the same cost five times as much: alternatives
# without a literal prefix are tried at every byte.
_SCREEN = bytes(
    ord("9") if 48 <= c <= 57 else ord("e") if c == ord("E") else ord("\\") if c == 0 else c
    for c in range(256)
)
_DIGITS = b"9" * 300
_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89abcdefABCDEF])")
_SURROGATE = re.compile("[\ud800-\udfff]")
# A double's largest finite magnitude has 309 integer digits.
_MAX_INT_DIGITS = 309


class StrictJsonError(Exception):
    """A body that breaks a rule. ``malformed`` when it is not JSON at all
    (400), otherwise valid JSON whose value cannot be accepted (422);
    ``field`` is the dotted path of the value."""

    def __init__(self, message: str, *, field: str = "", malformed: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.malformed = malformed


def check_body(raw: bytes) -> None:
    """Raise :class:`StrictJsonError` when ``raw`` (a JSON body) breaks a rule.

    A body that is not JSON at all is left to the route, which answers 400;
    only what would otherwise be accepted is refused here."""
    if not raw:
        return
    screened = raw.translate(_SCREEN, b"+-")
    # find(), not ``in``: bytes.__contains__ first tries its operand as an
    # integer, and for a bytes operand formats a TypeError it then clears.
    find = screened.find
    values = (
        find(b"NaN") >= 0 or find(b"Infinity") >= 0 or find(b"9e999") >= 0 or find(_DIGITS) >= 0
    )
    if not values and (find(b"\\") < 0 or (raw.find(b"\x00") < 0 and _ESCAPE.search(raw) is None)):
        return  # nothing suspect, or only harmless escapes (\u00e9, \", a surrogate pair)
    if b"\x00" in raw:
        raise StrictJsonError("the body contains a NUL byte", malformed=True)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StrictJsonError("the body is not UTF-8", malformed=True) from exc
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except StrictJsonError:
        raise
    except RecursionError as exc:
        raise StrictJsonError("the body is nested too deeply", malformed=True) from exc
    except ValueError:
        return  # not JSON: the route says so, with the position
    try:
        _walk(value, "")
    except RecursionError as exc:
        raise StrictJsonError("the body is nested too deeply", malformed=True) from exc


def check_query(raw: bytes) -> None:
    """A query string may not carry a NUL (``%00``): no text column stores it."""
    if raw and (b"%00" in raw or b"\x00" in raw):
        raise StrictJsonError("the query string contains a NUL character (%00)")


def _constant(name: str) -> Any:
    raise StrictJsonError(f"{name} is not JSON; send a number or null", malformed=True)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJsonError(f"the number {text[:40]} is beyond what a double can hold")
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise StrictJsonError("an integer of more than 309 digits is beyond what a double can hold")
    return int(text)


def _walk(value: Any, path: str) -> None:
    if isinstance(value, str):
        _check_text(value, path)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, path)
            _walk(item, f"{path}.{key}"[:200] if path else key[:200])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk(item, f"{path}[{index}]"[:200])


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise StrictJsonError(
            "a string contains a NUL character (\\u0000), which cannot be stored", field=path
        )
    if _SURROGATE.search(text):
        raise StrictJsonError(
            "a string contains a lone surrogate (\\ud800-\\udfff), which is not Unicode text",
            field=path,
        )
