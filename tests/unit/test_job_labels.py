"""A job's labels as users write them: what the create body accepts, and
the Idempotency-Key digest, whose recipe must not change for a body
without labels (its digest is stored with the key)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from cluster.services.job_document import BatchJobIn, CreateJobIn, fingerprint

BODY: dict[str, Any] = {
    "type": "order.cancel",
    "runAt": "2026-12-06T12:30:00+03:00",
    "target": {"kind": "HTTP", "url": "https://orders.example/cancel"},
    "payload": {"order": 98213},
}
# fingerprint(CreateJobIn(BODY)) computed on main at 08e7c27, before jobs
# had labels: a repeat of a key stored then must still match.
BEFORE_LABELS = "fa526cb2b01d33234ed4fe7c701b3f0df82fd4ea35483a46840bc1ea509da19a"


def test_a_body_without_labels_has_the_digest_it_had_before_labels() -> None:
    assert fingerprint(CreateJobIn.model_validate(BODY)) == BEFORE_LABELS
    # None and no labels are one request, as they are one job (NULL).
    assert fingerprint(CreateJobIn.model_validate({**BODY, "labels": None})) == BEFORE_LABELS
    assert fingerprint(CreateJobIn.model_validate({**BODY, "labels": {}})) == BEFORE_LABELS
    item = BatchJobIn.model_validate({**BODY, "runAt": "2026-12-06T09:30:00Z", "idempotencyKey": "k"})
    assert fingerprint(item, exclude={"idempotencyKey"}) == BEFORE_LABELS


def test_labels_count_in_the_digest_in_any_order() -> None:
    one = fingerprint(CreateJobIn.model_validate({**BODY, "labels": {"team": "pay", "env": "prod"}}))
    same = fingerprint(CreateJobIn.model_validate({**BODY, "labels": {"env": "prod", "team": "pay"}}))
    other = fingerprint(CreateJobIn.model_validate({**BODY, "labels": {"team": "pay", "env": "dev"}}))
    assert one == same
    assert len({one, other, BEFORE_LABELS}) == 3


def test_labels_within_the_limits_are_taken_as_they_are() -> None:
    labels = {
        "a": "",
        "k8s.io/app-name_1": "x" * 255,
        "Z" * 63: "ödeme",
        **{f"k{i}": str(i) for i in range(13)},
    }
    assert len(labels) == 16
    assert CreateJobIn.model_validate({**BODY, "labels": labels}).labels == labels


@pytest.mark.parametrize(
    "labels",
    [
        {"": "x"},  # an empty key
        {"a" * 64: "x"},  # a key over 63 characters
        {"-team": "x"},  # must start with a letter or digit
        {"team.": "x"},  # and end with one
        {"te am": "x"},  # no space
        {"team\n": "x"},  # not even at the end
        {"tëam": "x"},  # ASCII only
        {"team": "x" * 256},  # a value over 255 characters
        {"team": 1},  # values are strings
        {"team": None},
        {f"k{i}": "v" for i in range(17)},  # over 16 labels
        ["team=pay"],  # a map, not a list
        "team=pay",
    ],
)
def test_bad_labels_are_refused_naming_the_field(labels: Any) -> None:
    with pytest.raises(ValidationError) as refused:
        CreateJobIn.model_validate({**BODY, "labels": labels})
    assert [e["loc"][0] for e in refused.value.errors()] == ["labels"]
