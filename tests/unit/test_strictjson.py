"""The strict JSON rules (I-JSON) on raw bodies: what is refused, with which
answer, and that the cheap screen lets nothing through that the full parse
would refuse (hypothesis: any JSON text, any splice of a hostile token)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.api.strictjson import StrictJsonError, check_body, check_query

REFUSED = [
    (b'{"a":NaN}', True, ""),
    (b'{"a":[1,-Infinity]}', True, ""),
    (b'{"a":"\x00"}', True, ""),
    (b'{"a":"\xff"}', False, None),  # not UTF-8 but no suspect token: left to the route's 400
    # A number is refused as the parser meets it, before its place is known.
    (b'{"a":1e999}', False, ""),
    (b'{"a":-1E+400}', False, ""),
    (b'{"a":' + b"1" * 310 + b"}", False, ""),
    (b'{"a":{"b":"x\\u0000"}}', False, "a.b"),
    (b'{"a":["ok","\\ud800"]}', False, "a[1]"),
    (b'{"\\udfff":1}', False, ""),
]
ACCEPTED = [
    b'{"a":"NaN","Infinity":"1e999"}',
    b'{"a":1e-999,"b":1.7976931348623157e308,"c":-12345678901234567890}',
    b'{"a":"\\\\u0000","b":"\\u00e9\\ud83d\\ude00","c":"\\"quoted\\""}',
    b'{"a":"' + b"1" * 400 + b'"}',
    b"not json at all",
    b"",
]


@pytest.mark.parametrize(("raw", "malformed", "field"), REFUSED)
def test_refused(raw: bytes, malformed: bool, field: str | None) -> None:
    if field is None:
        check_body(raw)  # the route refuses it, with the parser's position
        return
    with pytest.raises(StrictJsonError) as caught:
        check_body(raw)
    assert caught.value.malformed is malformed
    assert caught.value.field == field


@pytest.mark.parametrize("raw", ACCEPTED)
def test_accepted(raw: bytes) -> None:
    check_body(raw)


def test_query_strings_carry_no_nul() -> None:
    check_query(b"after=abc&limit=5")
    with pytest.raises(StrictJsonError):
        check_query(b"after=a%00b")


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, derandomize=True, database=None)
@given(value=_values, ensure_ascii=st.booleans())
def test_the_screen_agrees_with_the_full_parse(value: object, ensure_ascii: bool) -> None:
    # Whatever Python's encoder writes (surrogates escaped or raw), the
    # screen refuses exactly what the full rules refuse.
    text = json.dumps(value, ensure_ascii=ensure_ascii)
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        return  # a lone surrogate cannot even be sent as UTF-8
    bad = _unstorable(value)
    if bad:
        with pytest.raises(StrictJsonError):
            check_body(raw)
    else:
        check_body(raw)


def _unstorable(value: object) -> bool:
    """A NUL or a lone surrogate anywhere (json.loads pairs what it can)."""
    if isinstance(value, str):
        return "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, list):
        return any(_unstorable(v) for v in value)
    if isinstance(value, dict):
        return any(_unstorable(k) or _unstorable(v) for k, v in value.items())
    return False
