"""The documents a job's target and a time are written in, as users write
them (the API's request bodies, a crons-as-code file), and their
validation: pydantic, no web framework, so the CLI reads a file with the
rules the server applies.

Times must be RFC 3339 with an offset; limits are checked here so that bad
input is a 4xx that changes nothing. A target's fields are its kind's
(:mod:`cluster.targets.kinds`): :data:`TargetIn` is built from the registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Field

from cluster.instants import INSTANT_PATTERN
from cluster.targets.document import Strict, TargetDocument
from cluster.targets.kinds import KINDS

__all__ = [
    "Rfc3339",
    "Strict",
    "TargetIn",
    "target_dict",
]

# The pattern is checked before any parse: what the document says is what is
# accepted (cluster.instants.INSTANT_PATTERN).
Rfc3339 = Annotated[str, Field(pattern=INSTANT_PATTERN, json_schema_extra={"format": "date-time"})]


def _target_union() -> Any:
    """A job's target: one of the registered kinds' models (each kind owns
    its model, cluster.targets.kinds), told apart by ``kind``, in
    registration order (the order OpenAPI lists them in)."""
    models = KINDS.documents()
    return Annotated[Union[models], Field(discriminator="kind")]  # noqa: UP007


if TYPE_CHECKING:
    # A union built at run time is no type to mypy: to it, any kind's model.
    TargetIn = TargetDocument
else:
    TargetIn = _target_union()


def target_dict(target: TargetDocument) -> dict[str, Any]:
    """``target.model_dump(exclude_none=True)``: the fields that are set, in
    their order. Every create makes one (1,000 a batch), and model_dump's
    dozen keyword arguments cost 1.0 us where the fields' own dict costs 0.4;
    a target's fields are plain values (a headers dict, no models inside)."""
    return {name: value for name, value in target.__dict__.items() if value is not None}
