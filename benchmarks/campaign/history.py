"""A campaign's history: what the clients asked and heard, what the target
received, and which faults were on when. Times are the host's wall clock
(epoch seconds), read by processes that run no fake clock: the load, the
nemesis and the target.

Each kind of record is one JSON object per line in its own file, so a run
that dies half way still leaves a history the checker can read.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Any, TypeVar

__all__ = [
    "FAULTS_FILE",
    "FIRINGS_FILE",
    "OPERATIONS_FILE",
    "Fault",
    "Firing",
    "Operation",
    "Recorder",
    "read_records",
]

OPERATIONS_FILE = "operations.jsonl"
FIRINGS_FILE = "firings.jsonl"
FAULTS_FILE = "faults.jsonl"


@dataclass(frozen=True)
class Operation:
    """One HTTP request of the load. ``ack``: the API answered 2xx.

    ``kind`` is ``create``, ``create_retry`` (the same Idempotency-Key again
    after a request that was not acknowledged), ``cancel``, ``patch`` or
    ``cron_create``. ``run_at`` is the runAt the request asked for (create,
    patch); ``job`` the job id it named or was answered with; ``tag`` the
    payload tag that the job's firings carry back.
    """

    id: int
    kind: str
    start: float
    end: float
    ack: bool
    status: int | None = None
    job: str | None = None
    key: str | None = None
    run_at: float | None = None
    tag: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Firing:
    """One request the target received; ``at`` is its arrival, ``status`` its answer."""

    at: float
    job: str
    attempt: int
    scheduled_for: float
    status: int
    tag: str | None = None  # a one-shot job's tag from its payload
    cron: str | None = None  # a cron's name from its payload


@dataclass(frozen=True)
class Fault:
    """One injected fault on ``on`` (a process, a shard, a link), from start to end."""

    kind: str
    on: str
    start: float
    end: float
    detail: str = ""


_Record = TypeVar("_Record", Operation, Firing, Fault)


class Recorder:
    """Appends records to a JSON-lines file from many threads; each line is
    flushed at once, so a killed run keeps what it recorded."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file: IO[str] = open(path, "a", encoding="utf-8")  # closed in close()

    def add(self, record: Operation | Firing | Fault) -> None:
        line = json.dumps(asdict(record), separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_records(path: Path, kind: type[_Record]) -> list[_Record]:
    """Every record in ``path``; a torn last line (a killed writer) is skipped."""
    if not path.exists():
        return []
    names = {f.name for f in fields(kind)}
    out: list[_Record] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            continue
        out.append(kind(**{k: v for k, v in data.items() if k in names}))
    return out
