"""What a target's request-body model is: a strict pydantic model whose
``kind`` field is a literal, the tag of the API's target union.

Each kind owns its model (``TargetKind.document``, in
:mod:`cluster.targets.kinds`); the union the API and crons-as-code validate
with is built from the registry (:mod:`cluster.services.documents`). This
module imports pydantic: a kind imports it only when its model is asked for,
so the CLI, which reads the kinds for its options, does not pay for it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Strict", "TargetDocument"]


# Unknown fields are refused: a typo such as ``maxAttempt`` must not be
# silently ignored. (No docstring: it would describe every model in OpenAPI.)
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=False)


# A kind's model declares ``kind: Literal["NAME"]`` and its own fields; its
# fields are plain values (strings, a dict of strings), never nested models,
# so the stored spec is the fields that are set (documents.target_dict).
class TargetDocument(Strict):
    pass
