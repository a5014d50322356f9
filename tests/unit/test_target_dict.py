"""A create's target as the store keeps it: what model_dump(exclude_none=True)
makes, from the model's fields without model_dump's cost."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from cluster.api.schemas import TargetIn, target_dict

_TARGETS = TypeAdapter(TargetIn)


@pytest.mark.parametrize(
    "given",
    [
        {"kind": "NOOP"},
        {"kind": "HTTP", "url": "https://orders.example/cancel"},
        {"kind": "HTTP", "url": "https://orders.example/cancel", "headers": {"X-Team": "pay"}},
        {"kind": "HTTP", "url": "https://orders.example/cancel", "headers": {}},
        {"kind": "KAFKA", "topic": "orders.cancel"},
        {"kind": "KAFKA", "topic": "orders.cancel", "key": "98213"},
    ],
)
def test_a_target_dict_is_model_dump_without_the_unset_fields(given: dict[str, Any]) -> None:
    target = _TARGETS.validate_python(given)
    made = target_dict(target)
    assert made == target.model_dump(exclude_none=True) == given
    assert list(made) == list(target.model_dump(exclude_none=True))
    # A dict of its own: the create adds to it (a trace's parent).
    made["traceparent"] = "00-x"
    assert "traceparent" not in target_dict(target)
