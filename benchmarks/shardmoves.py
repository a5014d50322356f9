"""The operator's side of resharding, over the wire: ``/api/v1/shards``
(what ``vakit shards add|rebalance|drain --wait|status`` call), each step
timed, and a move followed to its end as ``--wait`` follows it.

The figures come from the move record the API shows (``GET
/api/v1/shards``): rows copied and the seconds spent copying them, per
table, the slots and batches done, and each note the mover wrote on the way
(a batch postponed near a wave, a step retried).
"""

from __future__ import annotations

import json
import logging
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["MoveResult", "ShardsApi", "epoch_seen", "move_figures"]

log = logging.getLogger("benchmarks.shardmoves")

# The move record's tables that hold jobs (the rest: crons, their
# occurrence ledger, idempotency keys).
_JOB_TABLES = ("jobs", "jobs_far")


@dataclass
class MoveResult:
    kind: str  # "rebalance" | "drain"
    started: float  # epoch seconds
    ended: float
    record: dict[str, Any]  # the move record as the API showed it last
    notes: list[str]
    timed_out: bool = False


def _field(record: dict[str, Any], snake: str, camel: str, default: Any = None) -> Any:
    # The API shows the record camelCased (rowsCopied, rowsByTable); it
    # showed it as the mover stores it (snake_case) before: read either.
    return record.get(snake, record.get(camel, default))


class ShardsApi:
    """Operator calls to one API process (blocking; the harness's thread)."""

    def __init__(self, base_url: str, token: str, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                answer: dict[str, Any] = json.loads(resp.read() or b"{}")
                return answer
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode(errors="replace")
            exc.close()
            raise RuntimeError(f"{method} {path}: {exc.code} {detail}") from None

    def status(self, rows: bool = True) -> dict[str, Any]:
        """``rows=False``: without each shard's row counts (a read of every
        table), as ``--wait`` polls, so following a move does not load the shards."""
        return self.call("GET", "/api/v1/shards" + ("" if rows else "?rows=false"))

    def add(self, dsn: str) -> dict[str, Any]:
        """``vakit shards add DSN``: the new shard's number and the map's epoch."""
        return self.call("POST", "/api/v1/shards", {"dsn": dsn})

    def move(self, kind: str, shard: int | None = None, timeout: float = 3600.0) -> MoveResult:
        """``vakit shards rebalance --wait`` or ``drain N --wait``: start the
        move and follow its record to its end; a move still running after
        ``timeout`` s is cancelled (and the result says so)."""
        started = time.time()
        path = (
            "/api/v1/shards/rebalance" if kind == "rebalance" else f"/api/v1/shards/{shard}/drain"
        )
        move_id = self.call("POST", path)["id"]
        notes: list[str] = []
        timed_out = False
        while True:
            move = self.status(rows=False).get("move") or {}
            if move.get("id") != move_id:
                raise RuntimeError(f"the move record is {move.get('id')}, not ours ({move_id})")
            note = move.get("note")
            if note and (not notes or notes[-1] != note):
                notes.append(note)
            done, planned = (
                _field(move, "slots_done", "slotsDone"),
                _field(move, "slots_planned", "slotsPlanned"),
            )
            print(
                f"reshard: {kind} {move.get('state')} {done}/{planned} slots, "
                f"{_field(move, 'rows_copied', 'rowsCopied', 0):,} rows copied",
                file=sys.stderr,
                flush=True,
            )
            if move.get("state") not in ("running", "cancelling"):
                return MoveResult(kind, started, time.time(), move, notes, timed_out)
            if not timed_out and time.time() - started > timeout:
                log.warning("%s still running after %.0f s: cancelling it", kind, timeout)
                self.call("POST", "/api/v1/shards/move/cancel")
                timed_out = True
            time.sleep(1.0)


def epoch_seen(metrics_url: str, token: str | None = None) -> int | None:
    """The slot map's epoch a process routes by (its ``vakit_slot_map_epoch``
    gauge); None if it cannot be read. After the moves, every process should
    show the last epoch: one that does not routes by a stale map."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        request = urllib.request.Request(metrics_url, headers=headers)
        with urllib.request.urlopen(request, timeout=5) as resp:
            text = resp.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    for line in text.splitlines():
        if line.startswith("vakit_slot_map_epoch "):
            return int(float(line.split()[1]))
    return None


def move_figures(result: MoveResult) -> dict[str, Any]:
    """One move's figures: wall time, rows and jobs copied, and the rate of
    the copy itself (rows over the seconds spent copying, as the record
    keeps them) and over the whole move."""
    record = result.record
    rows = int(_field(record, "rows_copied", "rowsCopied", 0) or 0)
    copy_seconds = float(_field(record, "copy_seconds", "copySeconds", 0.0) or 0.0)
    tables: dict[str, int] = _field(record, "tables", "rowsByTable") or {}
    jobs = sum(n for t, n in tables.items() if t in _JOB_TABLES)
    wall = result.ended - result.started
    postponed = [n for n in result.notes if n.startswith("postponed")]
    return {
        "kind": result.kind,
        "drain": record.get("drain"),
        "state": record.get("state"),
        "timed_out": result.timed_out,
        "started_at": result.started,
        "seconds": round(wall, 3),
        "slots_planned": _field(record, "slots_planned", "slotsPlanned"),
        "slots_done": _field(record, "slots_done", "slotsDone"),
        "batches": record.get("batches"),
        "rows_copied": rows,
        "jobs_copied": jobs,
        "tables": tables,
        "copy_seconds": round(copy_seconds, 3),
        "rows_per_copy_second": round(rows / copy_seconds, 1) if copy_seconds > 0 else None,
        "jobs_per_copy_second": round(jobs / copy_seconds, 1) if copy_seconds > 0 else None,
        "rows_per_wall_second": round(rows / wall, 1) if wall > 0 else None,
        "postponed_notes": len(postponed),
        "notes": result.notes[:20],
    }
