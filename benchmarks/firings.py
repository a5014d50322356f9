"""What arrived at the target, read from the recording sink's file, and the
exactly-once audit of it (benchmarks.reshard).

The target is the witness here, not the shards: a job a move lost never
arrives, and one that two shards both served arrives twice, whatever each
shard's own tables say. Each line of the sink's record is one firing, the
arrival time and the body the worker sent (``jobId``, ``scheduledFor``,
``attempt`` and the payload the harness gave the job: ``{"k": kind, "i":
index}``, so a cron's occurrences are told apart by the cron's index).

Firing is at least once (DESIGN.md invariant 4): a job fired again after a
lease loss arrives twice, under the next attempt. The audit counts every
job that arrived more than once as doubled and says which of them came
under one attempt number twice (two owners firing the same attempt: the
guarantee a move must keep) and which under several (a retry).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from benchmarks.stats import summarize

__all__ = [
    "CRON",
    "Firing",
    "audit_crons",
    "audit_jobs",
    "first_arrivals",
    "lateness_by_window",
    "read_firings",
]

CRON = "cron"  # the payload kind of a cron's occurrences
_SAMPLES = 10


@dataclass(frozen=True, slots=True)
class Firing:
    received: float  # epoch seconds, at the sink
    job_id: str
    scheduled_for: float  # epoch seconds
    attempt: int
    kind: str  # the payload's "k"
    index: int  # the payload's "i" (-1 if none)


def _firing(line: bytes) -> Firing:
    stamp, _, body = line.partition(b" ")
    doc = orjson.loads(body)
    payload = doc.get("payload") or {}
    return Firing(
        received=float(stamp),
        job_id=doc["jobId"],
        scheduled_for=datetime.fromisoformat(doc["scheduledFor"]).timestamp(),
        attempt=int(doc["attempt"]),
        kind=str(payload.get("k", "")),
        index=int(payload.get("i", -1)),
    )


def read_firings(path: Path) -> list[Firing]:
    """Every firing the sink noted, in arrival order (a missing file: none)."""
    if not path.exists():
        return []
    with path.open("rb") as f:
        return [_firing(line) for line in f if line.strip()]


def _by_job(firings: Iterable[Firing]) -> dict[str, list[Firing]]:
    out: dict[str, list[Firing]] = defaultdict(list)
    for f in firings:
        out[f.job_id].append(f)
    return out


def _doubles(arrivals: dict[str, list[Firing]]) -> dict[str, Any]:
    """The ids that arrived more than once, split by whether an attempt
    number came twice (two owners) or only several attempts (retries)."""
    doubled = {j: fs for j, fs in arrivals.items() if len(fs) > 1}
    same = {j for j, fs in doubled.items() if len({f.attempt for f in fs}) < len(fs)}
    return {
        "doubled": len(doubled),
        "doubled_same_attempt": len(same),
        "doubled_retried": len(doubled) - len(same),
        "doubled_samples": [
            {"jobId": j, "attempts": [f.attempt for f in fs], "kind": fs[0].kind}
            for j, fs in list(doubled.items())[:_SAMPLES]
        ],
    }


def audit_jobs(
    expected: Mapping[str, str],
    firings: Iterable[Firing],
    answers: Mapping[tuple[str, int], str] | None = None,
) -> dict[str, Any]:
    """One-shot jobs: ``expected`` maps each job id the API said exists
    (created, or found by its key) to its kind; every one must arrive once.
    A one-shot firing of an id the API never gave is ``unexpected``: a
    create answered with an error that wrote the job anyway, or one whose
    answer never came (``answers``, (kind, index) to what its create was
    answered, tells them apart)."""
    arrivals = _by_job(f for f in firings if f.kind != CRON)
    lost = [j for j in expected if j not in arrivals]
    unexpected = [fs[0] for j, fs in arrivals.items() if j not in expected]
    mine = {j: fs for j, fs in arrivals.items() if j in expected}
    doubles = _doubles(mine)
    by_kind: dict[str, dict[str, int]] = defaultdict(lambda: {"expected": 0, "lost": 0})
    for job_id, kind in expected.items():
        by_kind[kind]["expected"] += 1
        if job_id not in arrivals:
            by_kind[kind]["lost"] += 1
    return {
        "expected": len(expected),
        "arrived": len(mine),
        "lost": len(lost),
        "lost_samples": lost[:_SAMPLES],
        **doubles,
        "unexpected": len(unexpected),
        "unexpected_by_create_answer": dict(
            Counter((answers or {}).get((f.kind, f.index), "unknown") for f in unexpected)
        ),
        "unexpected_samples": [
            {"jobId": f.job_id, "kind": f.kind, "index": f.index} for f in unexpected[:_SAMPLES]
        ],
        "by_kind": dict(by_kind),
        "exactly_once": not lost and doubles["doubled"] == 0 and not unexpected,
    }


def audit_crons(crons: int, slots: list[float], firings: Iterable[Firing]) -> dict[str, Any]:
    """Cron occurrences: each of ``crons`` crons (payload index 0..crons-1)
    must arrive once for each of ``slots`` (epoch seconds); wherever they
    fall, two occurrences (two job ids) of one (cron, slot) are doubled, and
    one occurrence that arrived twice is too, under its attempts."""
    mine = [f for f in firings if f.kind == CRON]
    per_slot: dict[tuple[int, float], set[str]] = defaultdict(set)
    for f in mine:
        per_slot[(f.index, f.scheduled_for)].add(f.job_id)
    window = set(slots)
    lost = [(i, s) for s in slots for i in range(crons) if (i, s) not in per_slot]
    two_jobs = {k: ids for k, ids in per_slot.items() if len(ids) > 1}
    doubles = _doubles(_by_job(mine))
    return {
        "crons": crons,
        "slots": [datetime.fromtimestamp(s, UTC).isoformat() for s in slots],
        "expected": crons * len(slots),
        "arrived": sum(1 for k in per_slot if k[1] in window),
        "lost": len(lost),
        "lost_samples": [{"cron": i, "slot": s} for i, s in lost[:_SAMPLES]],
        "doubled_occurrences": len(two_jobs),
        "doubled_occurrence_samples": [
            {"cron": i, "slot": s, "jobIds": sorted(ids)}
            for (i, s), ids in list(two_jobs.items())[:_SAMPLES]
        ],
        "redelivered": doubles["doubled"],
        "redelivered_same_attempt": doubles["doubled_same_attempt"],
        "redelivered_samples": doubles["doubled_samples"],
        "exactly_once": not lost and not two_jobs and doubles["doubled"] == 0,
    }


def first_arrivals(firings: Iterable[Firing]) -> list[Firing]:
    """Each job's first arrival (what its start lateness is measured by)."""
    first: dict[str, Firing] = {}
    for f in firings:
        seen = first.get(f.job_id)
        if seen is None or f.received < seen.received:
            first[f.job_id] = f
    return list(first.values())


def lateness_by_window(
    firsts: Iterable[Firing], windows: Mapping[str, tuple[float, float]]
) -> dict[str, Any]:
    """Start lateness at the target (first arrival minus scheduledFor) of the
    jobs scheduled within each window ``[from, to)``: all kinds together and
    per kind."""
    values: dict[str, dict[str, list[float]]] = {w: defaultdict(list, all=[]) for w in windows}
    for f in firsts:
        for name, (lo, hi) in windows.items():
            if lo <= f.scheduled_for < hi:
                late = f.received - f.scheduled_for
                values[name]["all"].append(late)
                values[name][f.kind].append(late)
    return {
        name: {
            "from": lo,
            "to": hi,
            **{
                kind: {"jobs": len(vals), **summarize(vals)}
                for kind, vals in sorted(values[name].items())
            },
        }
        for name, (lo, hi) in windows.items()
    }
