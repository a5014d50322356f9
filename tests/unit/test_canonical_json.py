"""canonical_json writes exactly what json.dumps(sort_keys, compact) writes.

Idempotency fingerprints are digests of these bytes and are stored with the
keys: a byte of difference would turn a client's honest repeat, sent across
an upgrade, into a 422.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.api.schemas import BatchJobIn, CreateJobIn, fingerprint
from cluster.model.jsontext import canonical_json


def _stdlib(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


# Surrogates never pass the API (strict JSON).
_CHARS = st.characters(blacklist_categories=["Cs"])
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()  # past 64 bits too: orjson refuses those
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(min_value=1e-9, max_value=1e-3)  # where the two notations part
    | st.floats(min_value=1e14, max_value=1e18)
    | st.text(_CHARS)
    | st.text(st.characters(max_codepoint=0x7F))
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(st.text(_CHARS, max_size=6), inner, max_size=5),
    max_leaves=25,
)


@settings(max_examples=2000)
@given(_VALUES)
def test_the_same_bytes_as_json(value: Any) -> None:
    assert canonical_json(value) == _stdlib(value)


@pytest.mark.parametrize("code", range(0x80))
def test_every_ascii_character_in_keys_and_values(code: int) -> None:
    value = {f"k{chr(code)}": f"v{chr(code)}w", "z": [chr(code)]}
    assert canonical_json(value) == _stdlib(value)


@pytest.mark.parametrize(
    "number",
    [0.0, -0.0, 0.1, 1.0, 1e-4, 1e-5, 1.5e-7, 1e15, 1e16, 1.2345678901234568e17, 1e22,
     9.99e-5, 1e-6, 1.234e-7, 1e-10, 1e100, -2.5e-8,
     5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 123456789.125,
     2**53, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30],
)  # fmt: skip
def test_numbers_at_the_edges(number: float) -> None:
    value = {"n": number, "list": [number, -number]}
    assert canonical_json(value) == _stdlib(value)


@pytest.mark.parametrize(
    ("run_at", "payload", "digest"),
    [
        # ASCII, no exponent: written by orjson now
        ("2026-12-01T09:30:00Z", {"order": 98213, "note": "plain", "amount": 12.5},
         "2dda581f8a9b9d7abea9b2aee3d454a08a5d525b754558b4c1edfb634b1420ed"),
        # non-ASCII text and an exponent: written by json
        ("2026-12-01T12:30:00+03:00", {"order": 98213, "note": "ödeme yok", "amount": 12.5, "big": 1e16},
         "dc92880f09e52a386f147a16c8511a4b63d48d3d8820e30128d95527c76aa5e4"),
    ],
)  # fmt: skip
def test_a_job_fingerprint_is_the_digest_it_always_was(
    run_at: str, payload: dict[str, Any], digest: str
) -> None:
    """Digests computed by the recipe before orjson took part (json.dumps
    alone): the stored fingerprints of live keys must still match their
    repeats."""
    body = CreateJobIn.model_validate(
        {
            "type": "order.cancel",
            "runAt": run_at,
            "target": {"kind": "HTTP", "url": "https://orders.example/cancel"},
            "payload": payload,
        }
    )
    assert fingerprint(body) == digest


def test_a_batch_items_fingerprint_is_the_single_creates_without_its_key() -> None:
    """A batch item's digest leaves its own key out: the same job sent
    singly (its key a header) or in a batch is one request."""
    item = {
        "type": "order.cancel",
        "runAt": "2026-12-01T09:30:00Z",
        "target": {"kind": "HTTP", "url": "https://orders.example/cancel"},
        "payload": {"order": 98213, "note": "plain", "amount": 12.5},
    }
    batched = BatchJobIn.model_validate({**item, "idempotencyKey": "order-98213"})
    digest = "2dda581f8a9b9d7abea9b2aee3d454a08a5d525b754558b4c1edfb634b1420ed"
    assert fingerprint(batched, exclude={"idempotencyKey"}) == digest
