"""The API's cost per create in instructions, which this machine's noise
cannot move: a live API process under ``valgrind --tool=callgrind``.

This machine's vCPU changes speed by a third and more from one run to the
next (the yardstick in every report), so an A/B of a change worth a few per
cent of a create's CPU needs many alternating runs of
``benchmarks.sustained``. Instructions do not move: the same tree gives the
same count within a few tenths of a per cent. Here the harness starts the
shards (durable), ZooKeeper and a worker as the other benchmarks do, and the
API under callgrind with instrumentation off; after a warm-up it counts the
API process's instructions (every thread) over ``--creates`` serial single
creates, or ``--batches`` batches of ``--batch`` jobs, each request waiting
for the previous answer::

    python -m benchmarks.instructions                     # 1,000 single creates
    python -m benchmarks.instructions --batches 10        # 10 batches of 1,000

Prints one line per run, with the instructions per job; ``--json`` writes the
figures too. Needs valgrind (``make setup`` installs it). The API runs about
fifty times slower under it: a run takes a minute or two.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from benchmarks.harness import BenchCluster, ClusterSpec
from benchmarks.leanhttp import LeanClient
from benchmarks.report import machine_info
from cluster.instants import format_instant

__all__ = ["main", "measure", "total_instructions"]

_API_START_SECONDS = 600.0  # the API imports and starts under valgrind
_WARM_REQUESTS = 3  # batches; single creates warm up with a hundred times this


def _toggle(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def total_instructions(dump: Path) -> int:
    """The ``totals:`` line of a callgrind dump (instructions, event Ir)."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise ValueError(f"{dump}: no totals line")


def _job(n: int, run_at: str) -> dict[str, Any]:
    return {"type": "bench", "runAt": run_at, "target": {"kind": "NOOP"}, "payload": {"order": n}}


async def _drive(url: str, token: str, requests: int, batch: int | None) -> None:
    """``requests`` creates (single, or batches of ``batch``), one at a time."""
    client = LeanClient(url, {"Authorization": f"Bearer {token}"}, connections=1)
    run_at = format_instant(datetime.now(UTC) + timedelta(hours=1))
    try:
        for n in range(requests):
            if batch is None:
                answer = await client.post("/api/v1/jobs", orjson.dumps(_job(n, run_at)), timeout=120)
                if answer.status != 201:
                    raise RuntimeError(f"create answered {answer.status}: {answer.body[:300]!r}")
            else:
                body = orjson.dumps({"jobs": [_job(n * batch + i, run_at) for i in range(batch)]})
                answer = await client.post("/api/v1/jobs:batch", body, timeout=600)
                statuses = {r["status"] for r in orjson.loads(answer.body)["results"]} if answer.status == 200 else {answer.status}
                if statuses != {201}:
                    raise RuntimeError(f"batch answered {answer.status}, items {sorted(statuses)}")
    finally:
        await client.close()


def measure(requests: int, batch: int | None, out: Path) -> dict[str, Any]:
    """Instructions of the API process over ``requests`` serial requests."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("benchmarks.instructions needs valgrind: apt-get install valgrind (make setup does)")
    machine = machine_info()
    dumps_dir = out / "callgrind"
    dumps_dir.mkdir(parents=True, exist_ok=True)
    # The API under callgrind, instrumentation off until _toggle turns it on.
    callgrind = (
        "valgrind", "--tool=callgrind", "--instr-atstart=no",
        f"--callgrind-out-file={dumps_dir}/callgrind.out.%p",
    )  # fmt: skip
    spec = ClusterSpec(
        out=out, workers=1, api_prefix=callgrind, api_start_seconds=_API_START_SECONDS
    )
    with BenchCluster(spec) as cluster:
        cluster.start_scheduler("noop")
        url, token = cluster.start_api("instructions")
        api_pid = cluster.pid_of("api")
        warm = _WARM_REQUESTS if batch else 100 * _WARM_REQUESTS
        asyncio.run(_drive(url, token, warm, batch))
        _toggle(api_pid, "-i", "on")
        started = time.monotonic()
        asyncio.run(_drive(url, token, requests, batch))
        seconds = time.monotonic() - started
        _toggle(api_pid, "-i", "off")
        _toggle(api_pid, "-d")
        dumps = sorted(dumps_dir.glob(f"callgrind.out.{api_pid}.*"))
        if not dumps:
            raise RuntimeError("callgrind wrote no dump")
        total = total_instructions(dumps[-1])
    jobs = requests * (batch or 1)
    return {
        "benchmark": "instructions",
        "mode": "batch" if batch else "single",
        "requests": requests,
        "jobs": jobs,
        "batch": batch,
        "instructions": total,
        "instructions_per_job": round(total / jobs),
        "seconds": round(seconds, 1),
        "settings": {
            "shards": spec.shards,
            "durable": spec.durable,
            "zookeeper": spec.zookeeper,
            "target": "NOOP",
            "machine": machine,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--creates", type=int, default=1000, help="serial single creates counted")
    parser.add_argument("--batches", type=int, default=0, help="count this many batches instead")
    parser.add_argument("--batch", type=int, default=1000, help="jobs a batch")
    parser.add_argument("--out", type=Path, help="logs and the callgrind dump (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="vakit-bench-instructions-"))
    if args.batches:
        report = measure(args.batches, args.batch, out)
    else:
        report = measure(args.creates, None, out)
    what = f"batches={report['requests']}x{report['batch']}" if report["batch"] else f"creates={report['requests']}"
    print(
        f"instructions[{report['mode']}]: {what} per_job={report['instructions_per_job']:,} "
        f"total={report['instructions']:,} ({report['seconds']} s under callgrind)",
        flush=True,
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
