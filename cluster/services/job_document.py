"""A one-shot job as users write it (the API's create body, an item of a
batch) and the digest that tells a repeat of it from a reuse of its key.

pydantic, no web framework: the service layer takes these documents as
they are (:mod:`cluster.services.jobs`), and the API's routes validate
requests with them.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints, WithJsonSchema, field_validator

from cluster.instants import parse_instant
from cluster.model.jsontext import canonical_json
from cluster.services.documents import Rfc3339, Strict, TargetIn

__all__ = [
    "LABEL_KEY",
    "MAX_LABELS",
    "MAX_LABEL_KEY",
    "MAX_LABEL_VALUE",
    "BatchJobIn",
    "CreateJobIn",
    "LabelKey",
    "LabelValue",
    "Labels",
    "fingerprint",
    "utc_instant",
]

# A job's labels: a small map an owner finds its jobs by (exact match).
# Kubernetes' label rules, which users know: a key of letters and digits,
# with . _ / - inside; a short value.
MAX_LABELS = 16
MAX_LABEL_KEY = 63
MAX_LABEL_VALUE = 255
LABEL_KEY = r"^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$"
LabelKey = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_LABEL_KEY, pattern=LABEL_KEY)
]
LabelValue = Annotated[str, StringConstraints(max_length=MAX_LABEL_VALUE)]
# The JSON Schema pydantic writes for such a dict lists the pattern under
# patternProperties, which lets any other key through: the document says
# what the validation does instead.
Labels = Annotated[
    dict[LabelKey, LabelValue],
    Field(max_length=MAX_LABELS),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": MAX_LABELS,
            "propertyNames": {"minLength": 1, "maxLength": MAX_LABEL_KEY, "pattern": LABEL_KEY},
            "additionalProperties": {"type": "string", "maxLength": MAX_LABEL_VALUE},
            "description": f"At most {MAX_LABELS} labels: keys of 1 to {MAX_LABEL_KEY} letters, digits "
            "and . _ / - (starting and ending with a letter or digit), values of at most "
            f"{MAX_LABEL_VALUE} characters.",
        }
    ),
]


@lru_cache(maxsize=1024)
def utc_instant(value: str) -> datetime:
    """A runAt the validator accepted, in UTC: a batch's jobs usually share
    one, and a single create's repeat (a retry) has the same."""
    return parse_instant(value, "runAt").astimezone(UTC)


class CreateJobIn(Strict):
    type: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    runAt: Rfc3339
    target: TargetIn
    payload: Any = None
    maxAttempts: int = Field(5, ge=1, le=100)
    timeoutSeconds: int = Field(60, ge=1, le=86400)
    labels: Labels | None = None

    @field_validator("runAt")
    @classmethod
    def _run_at(cls, value: str) -> str:
        utc_instant(value)  # parsed once: the handler's run_at() is a cache hit
        return value

    def run_at(self) -> datetime:
        """``runAt`` as an instant in UTC."""
        return utc_instant(self.runAt)


def fingerprint(body: BaseModel, exclude: set[str] | None = None) -> str:
    """A stable digest of a request, to tell a repeat from a reuse of a key.

    ``runAt`` counts as the instant it names, not its spelling: ``…09:30:00Z``
    and ``…12:30:00+03:00`` are one request. The instant is written as UTC
    with ``Z`` and no zero fraction, which is how most clients spell it, so
    the digests of such requests are the ones stored before this rule; a key
    first used with another spelling before it answers a repeat with 409.
    The digest is stored with the key, so its recipe must not change again:
    a repeat sent after an upgrade must still match the first request:
    a body without labels (or with none, ``{}``) is digested without the
    field, as every body was before jobs had labels."""
    # model_dump's own serializer, called without the wrapper's dozen keyword
    # arguments (1.5 against 2.1 us an item of a keyed batch); the same dict.
    data = body.__pydantic_serializer__.to_python(body, mode="json", exclude=exclude)
    if "labels" in data and not data["labels"]:
        del data["labels"]
    run_at = data.get("runAt")
    if isinstance(run_at, str):
        data["runAt"] = _instant_text(run_at)
    return hashlib.sha256(canonical_json(data)).hexdigest()


@lru_cache(maxsize=1024)
def _instant_text(run_at: str) -> str:
    """``runAt`` as the fingerprint writes it. Cached as its parse is: the
    items of a batch often share their instant, and this was a fifth of a
    keyed item's fingerprint."""
    return parse_instant(run_at, "runAt").astimezone(UTC).isoformat().replace("+00:00", "Z")


class BatchJobIn(CreateJobIn):
    """One job of a batch: a single create's body, and its own key."""

    idempotencyKey: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="As the Idempotency-Key header of a single create, per job.",
    )
