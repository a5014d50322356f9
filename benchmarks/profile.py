"""Summaries of the workers' py-spy profiles (``--profile``).

py-spy's raw format is one collapsed stack per line: ``frame;frame;… count``,
each frame ``function (path:line)``. Idle waits are not sampled, so the counts
are CPU time; the summary says where it went: by package (psycopg, asyncio,
cluster, …) for the frame on top of the stack (self time), and by function
for both self time and inclusive time (the function or anything it called).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["read_collapsed", "summarize_profiles", "write_summary"]

# Frames on (nearly) every stack, such as the event loop's run_forever, say nothing.
_UBIQUITOUS = 0.9


def read_collapsed(path: Path) -> Counter[tuple[str, ...]]:
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(stack.split(";"))] += int(count)
    return stacks


def _package(frame: str) -> str:
    # "Worker._run_job (cluster/worker.py:175)" -> "cluster"
    where = frame.rpartition(" (")[2].rstrip(")")
    path = where.rpartition(":")[0] or where
    head = path.split("/", 1)[0]
    return head.removesuffix(".py") if "/" not in path else head


def summarize_profiles(paths: Iterable[Path], top: int = 20) -> dict[str, Any]:
    stacks: Counter[tuple[str, ...]] = Counter()
    for path in paths:
        stacks.update(read_collapsed(path))
    total = sum(stacks.values())
    if not total:
        return {"samples": 0}
    by_package: Counter[str] = Counter()
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for stack, n in stacks.items():
        by_package[_package(stack[-1])] += n
        self_time[stack[-1]] += n
        for frame in set(stack):
            inclusive[frame] += n

    def shares(counter: Counter[str]) -> list[list[Any]]:
        return [
            [name, round(n / total, 4)]
            for name, n in counter.most_common()
            if n / total < _UBIQUITOUS
        ][:top]

    return {
        "samples": total,
        "self_by_package": shares(by_package),
        "self_by_function": shares(self_time),
        "inclusive_by_function": shares(inclusive),
    }


def write_summary(summary: dict[str, Any], path: Path) -> Path:
    lines = [f"samples (CPU, all workers): {summary.get('samples', 0)}"]
    for key in ("self_by_package", "self_by_function", "inclusive_by_function"):
        lines.append(f"\n{key.replace('_', ' ')}:")
        lines += [f"  {share * 100:5.1f}%  {name}" for name, share in summary.get(key, [])]
    path.write_text("\n".join(lines) + "\n")
    return path
