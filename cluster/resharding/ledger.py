"""The move under way, as the mover records it after each step.

One record for the cluster (ZooKeeper ``{root}/moves/current``), rewritten by
compare-and-set after every step of every batch, so a mover that is killed is
followed by one that resumes at the step recorded: each step is idempotent.
The record is also what ``vakit shards status`` shows of a move.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from cluster.instants import format_instant
from shardmap import SlotMap

__all__ = ["STEPS", "Batch", "MoveLedger", "MoveRecord"]

# A batch's steps, in order. Until "flip" a batch can be rolled back (the
# source still holds the rows and the map still names it); from "flip" on,
# it can only go forward.
STEPS = ("fence", "copy", "flip", "clean")


@dataclass(frozen=True)
class Batch:
    """Slots moving together from ``source`` to ``target``, at ``step``."""

    slots: tuple[int, ...]
    source: int
    target: int
    step: str = "fence"

    def at(self, step: str) -> Batch:
        return replace(self, step=step)


@dataclass(frozen=True)
class MoveRecord:
    """A rebalance or a drain, from its request to its end."""

    id: str
    kind: str  # "rebalance" | "drain"
    drain: int | None
    state: str  # "running" | "cancelling" | "done" | "cancelled" | "failed"
    started_at: float
    updated_at: float
    slots_planned: int
    slots_done: int = 0
    rows_copied: int = 0
    copy_seconds: float = 0.0
    batches: int = 0
    batch: Batch | None = None
    note: str | None = None
    tables: dict[str, int] = field(default_factory=dict)

    @classmethod
    def new(cls, kind: str, drain: int | None, slots_planned: int, now: float) -> MoveRecord:
        return cls(uuid.uuid4().hex[:12], kind, drain, "running", now, now, slots_planned)

    @property
    def active(self) -> bool:
        return self.state in ("running", "cancelling")

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["batch"] = asdict(self.batch) if self.batch else None
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> MoveRecord:
        batch = body.get("batch")
        fields = {
            **body,
            "batch": Batch(tuple(batch["slots"]), batch["source"], batch["target"], batch["step"])
            if batch
            else None,
        }
        return cls(**fields)

    def rate(self) -> float | None:
        """Rows copied a second of copying, once something was copied."""
        return self.rows_copied / self.copy_seconds if self.copy_seconds > 0 else None

    def eta_seconds(self) -> float | None:
        """What is left at the rate so far (rows a slot as moved so far)."""
        rate = self.rate()
        if rate is None or self.slots_done == 0:
            return None
        left = max(0, self.slots_planned - self.slots_done)
        return left * (self.rows_copied / self.slots_done) / rate

    def summary(self) -> dict[str, Any]:
        """The record as the API and ``vakit shards status`` show it (camelCase)."""
        batch = self.batch
        return {
            "id": self.id,
            "kind": self.kind,
            "drain": self.drain,
            "state": self.state,
            "startedAt": _instant(self.started_at),
            "updatedAt": _instant(self.updated_at),
            "slotsPlanned": self.slots_planned,
            "slotsDone": self.slots_done,
            "rowsCopied": self.rows_copied,
            "rowsByTable": dict(self.tables),
            "copySeconds": round(self.copy_seconds, 3),
            "batches": self.batches,
            "batch": (
                {
                    "slots": len(batch.slots),
                    "source": batch.source,
                    "target": batch.target,
                    "step": batch.step,
                }
                if batch
                else None
            ),
            "note": self.note,
            "ratePerSecond": self.rate(),
            "etaSeconds": self.eta_seconds(),
        }


def _instant(posix: float) -> str:
    return format_instant(datetime.fromtimestamp(posix, UTC))


class MoveLedger(Protocol):
    """Where the mover keeps its record and the cluster's map (ZooKeeper's
    :class:`cluster.coordination.topology.ZkTopology`). Blocking calls."""

    def read_move(self) -> tuple[dict[str, Any] | None, int]: ...

    def write_move(self, record: dict[str, Any], version: int) -> int: ...

    def read_map(self) -> SlotMap: ...

    def replace_map(self, expected_epoch: int, new: SlotMap) -> SlotMap: ...

    def retired(self) -> frozenset[int]: ...
