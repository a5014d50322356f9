"""The same wave through two doors, alternately: how a front door's drain
compares with the COPYed wave's on the same tree, as one figure.

``python -m benchmarks.doors --jobs 1000000 --rounds 2 [--door crons] [wave options]``

Runs ``benchmarks.wave`` ``--rounds`` times through each door, each run on
a cluster of its own, in the order copy, door, copy, door, …, copy: every
run of the door has a COPY run just before and just after it. A machine
whose speed drifts (a shared one moves by a third within an hour) moves
both neighbours with it, so each door run is compared with the mean of the
two COPY runs around it; the report gives those ratios and their median.

The COPY runs are ``wave --source copy --copy-as-doors``: the same wave
as the door's (its owners, their rows interleaved as the door's concurrent
batches leave them) on the same cluster (the API processes running, idle,
with their background counts), so that the ratio is the door's own cost.
Against ``--door crons`` they are also due at a whole minute, as a crons
wave is (``--due-on-minute``; ``wave.due_at`` says why). A COPY of one
owner's rows with no API, due a fixed lead ahead, as before 2026-12-07, is
``--plain-copy``.

Every other option is the wave's, for every run (``--lead`` only for the
door's runs: a COPYed wave takes the wave's own lead). Writes
``report.json`` to ``--out``, each run's own report in a subdirectory, and
prints the wave's summary line per run and one line of ratios.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks import wave
from benchmarks.harness import setup_logging, terminate_on_sigterm
from benchmarks.report import summary_line

__all__ = ["door_ratios", "main", "run_options", "run_order"]

log = logging.getLogger("benchmarks.doors")

DOORS = tuple(s for s in wave.SOURCES if s != "copy")


def run_order(door: str, rounds: int) -> list[str]:
    """copy, door, copy, …, copy: ``rounds`` runs of the door, each between
    two COPY runs."""
    return ["copy", *[s for _ in range(rounds) for s in (door, "copy")]]


def door_ratios(drains: list[tuple[str, float | None]]) -> list[float | None]:
    """Each door run's drain over the mean drain of the COPY runs next to
    it, for ``drains`` in :func:`run_order` order; None where a run drained
    nothing to compare."""
    ratios: list[float | None] = []
    for i, (source, drain) in enumerate(drains):
        if source == "copy":
            continue
        around = [d for s, d in (drains[i - 1], drains[i + 1]) if s == "copy" and d]
        ratios.append(round(drain / statistics.fmean(around), 3) if drain and around else None)
    return ratios


def _speed(speed: dict[str, Any] | None) -> dict[str, Any] | None:
    """A run's drain-time speed readings without each round's."""
    return {k: v for k, v in speed.items() if k != "rounds_ms"} if speed else None


def run_options(
    opts: wave.WaveOptions, source: str, *, door: str, plain_copy: bool, out: Path
) -> wave.WaveOptions:
    """One run's options: the door's with ``--lead``; a COPY run with the
    wave's own lead, as the door's wave (owners, idle API) unless
    ``--plain-copy``, and due at a whole minute where the door's wave is
    (crons; ``wave.due_at`` says why the phase matters)."""
    as_doors = source == "copy" and not plain_copy
    return replace(
        opts,
        source=source,
        lead=opts.lead if source != "copy" else None,
        copy_as_doors=as_doors,
        due_on_minute=as_doors and door == "crons",
        cluster=replace(opts.cluster, out=out),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.doors",
        description=__doc__.split("\n\n")[0],
        epilog="Any other option is benchmarks.wave's (python -m benchmarks.wave --help).",
    )
    parser.add_argument("--door", choices=DOORS, default="crons", help="the door to compare with COPY")
    parser.add_argument("--rounds", type=int, default=2, help="runs through the door")
    parser.add_argument("--out", default="bench-out/doors", help="report directory")
    parser.add_argument(
        "--plain-copy",
        action="store_true",
        help="COPY one owner's rows with no API process (the yardstick before 2026-12-07), "
        "not the door's owners and cluster",
    )
    args, rest = parser.parse_known_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if any(a == "--source" or a.startswith("--source=") for a in rest):
        parser.error("--source is set per run here; use --door")
    opts, verbose = wave.parse_args([*rest, "--out", args.out])
    setup_logging(verbose)
    out = Path(args.out)
    order = run_order(args.door, args.rounds)
    runs: list[dict[str, Any]] = []
    try:
        with terminate_on_sigterm():
            for i, source in enumerate(order):
                run_opts = run_options(
                    opts, source, door=args.door, plain_copy=args.plain_copy,
                    out=out / f"{i}-{source}",
                )  # fmt: skip
                log.info("run %d of %d: %s", i + 1, len(order), source)
                report = wave.run(run_opts)
                print(summary_line("wave", report), flush=True)
                runs.append(
                    {
                        "source": source,
                        "out": str(run_opts.cluster.out),
                        "drain_jobs_per_s": report["drain_jobs_per_s"],
                        "lateness_seconds": report["lateness_seconds"],
                        "started_within_60s": report["started_within_60s"],
                        "cpu_us_per_job": report["usage"]["cpu_us_per_job"],
                        "machine_steal_fraction": report["usage"]["machine_steal_fraction"],
                        # The hour's speed as the run started (benchmarks/yardstick.py).
                        "yardstick": report["settings"]["machine"].get("yardstick"),
                        # ... and while it drained: the drains compared ran
                        # on one machine only if these agree.
                        "cpu_speed": _speed(report["usage"].get("cpu_speed")),
                    }
                )
    except KeyboardInterrupt:
        print("doors: interrupted; everything started was stopped", file=sys.stderr)
        return 130
    ratios = door_ratios([(r["source"], r["drain_jobs_per_s"]) for r in runs])
    known = [r for r in ratios if r is not None]
    summary = {
        "benchmark": "doors",
        "door": args.door,
        "rounds": args.rounds,
        "jobs": opts.jobs,
        "copy": "plain" if args.plain_copy else "as the door's wave and cluster",
        "order": order,
        "runs": runs,
        "drain_vs_copy": ratios,
        "drain_vs_copy_median": round(statistics.median(known), 3) if known else None,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"doors[{args.door} vs copy]: jobs={opts.jobs:,} drains="
        + "/".join(f"{r['source']}:{r['drain_jobs_per_s'] or 0:,.0f}" for r in runs)
        + " ratios="
        + "/".join("-" if r is None else f"{r:.1%}" for r in ratios)
        + (f" median={summary['drain_vs_copy_median']:.1%}" if known else "")
        + " speed_in_drain(cpu ms)="
        + "/".join(f"{r['cpu_speed']['cpu_ms']:.0f}" if r["cpu_speed"] else "-" for r in runs),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
