"""The checker: a verdict from a campaign's history and the shards' final
state. Pure: no clock, no I/O (the runner reads the files and the shards).

What each count means, with at-least-once in mind (DESIGN.md, invariant 4):
a job may be fired again with a higher attempt (a lease expired, a retry),
and a cron slot's occurrence may be fired at several attempts. What must
never happen:

* ``lost_jobs``: a create was acknowledged, no cancel of it was, it was due
  before the run's deadline, and the target never answered 2xx to it (and
  the shard does not hold it as CANCELLED or FAILED, dead-lettered, which are
  counted apart: ``dead_lettered``).
* ``doubled_firings``: one ``(jobId, attempt)`` received more than once.
  A new attempt is a redelivery at-least-once allows; the same attempt twice
  means two workers held one claim, the doubling fencing exists to prevent.
* ``doubled_cron_slots``: one cron slot (cron, scheduledFor) fired as two
  different jobs: two occurrences of one slot.
* ``early_firings``: a firing received before its time: for a one-shot job
  the earliest runAt any create or patch of it asked for (so a patch that was
  not acknowledged but did apply is never counted against the scheduler),
  for a cron occurrence its scheduledFor.
* ``missing_acknowledged_creates``: an acknowledged job id that no table of
  the shards holds at the end (jobs, jobs_far, job_history).
* ``fired_after_cancel``: a cancel was acknowledged, and a firing of that job
  arrived after the acknowledgement.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.campaign.history import Fault, Firing, Operation

__all__ = ["ABSENT", "RECOVERY_SECONDS", "Verdict", "check"]

# The final-state status of an acknowledged job that no table holds.
ABSENT = "ABSENT"
# After a fault ends, the cluster may take this long to be back at pace (a
# lease of 3 s + 1 s grace, a 4 s ZooKeeper session, a restart): firings due
# in a fault window or this soon after it are left out of the lateness figure.
RECOVERY_SECONDS = 10.0
ON_TIME_SECONDS = 5.0
_CREATES = ("create", "create_retry")


@dataclass
class Verdict:
    seed: int
    operations: int = 0
    lost_jobs: int = 0
    doubled_firings: int = 0
    doubled_cron_slots: int = 0
    early_firings: int = 0
    missing_acknowledged_creates: int = 0
    fired_after_cancel: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    # Figures beside the counts, and the ids behind each non-zero count.
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "operations": self.operations,
            "lost_jobs": self.lost_jobs,
            "doubled_firings": self.doubled_firings,
            "doubled_cron_slots": self.doubled_cron_slots,
            "early_firings": self.early_firings,
            "missing_acknowledged_creates": self.missing_acknowledged_creates,
            "fired_after_cancel": self.fired_after_cancel,
            "faults": dict(sorted(self.faults.items())),
            **self.details,
        }

    @property
    def clean(self) -> bool:
        """No loss, doubling, early firing or fired cancel."""
        return not (
            self.lost_jobs or self.doubled_firings or self.doubled_cron_slots
            or self.early_firings or self.missing_acknowledged_creates
            or self.fired_after_cancel
        )  # fmt: skip


@dataclass
class _Job:
    acked: bool = False
    run_ats: list[float] = field(default_factory=list)  # asked for, acked or not
    acked_run_ats: list[float] = field(default_factory=list)
    cancel_acked_at: float | None = None


def _jobs(operations: Iterable[Operation]) -> dict[str, _Job]:
    jobs: dict[str, _Job] = defaultdict(_Job)
    # A create that was not acknowledged may still have created its job; its
    # id is unknown then, but a keyed retry's answer names it: the key ties
    # the runAt asked for to that id.
    run_at_by_key: dict[str, list[float]] = defaultdict(list)
    for op in operations:
        if op.kind in _CREATES and op.key and op.run_at is not None:
            run_at_by_key[op.key].append(op.run_at)
    for op in operations:
        if op.job is None:
            continue
        job = jobs[op.job]
        if op.kind in _CREATES:
            job.acked |= op.ack
            if op.run_at is not None:
                job.run_ats.append(op.run_at)
                if op.ack:
                    job.acked_run_ats.append(op.run_at)
            if op.key:
                job.run_ats += run_at_by_key[op.key]
        elif op.kind == "patch" and op.run_at is not None:
            job.run_ats.append(op.run_at)
            if op.ack:
                job.acked_run_ats.append(op.run_at)
        elif op.kind == "cancel" and op.ack:
            done = op.end if job.cancel_acked_at is None else min(op.end, job.cancel_acked_at)
            job.cancel_acked_at = done
    return jobs


def _quantiles(values: list[float]) -> dict[str, float] | None:
    """p50, p99 and max of the first firings' lateness, every window included."""
    if not values:
        return None
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"p50": at(0.5), "p99": at(0.99), "max": round(ordered[-1], 3)}


def _in_fault_window(t: float, faults: Sequence[Fault]) -> bool:
    return any(f.start - 1.0 <= t <= f.end + RECOVERY_SECONDS for f in faults)


def check(
    operations: Sequence[Operation],
    firings: Sequence[Firing],
    faults: Sequence[Fault],
    final: Mapping[str, str],
    *,
    seed: int,
    due_by: float,
) -> Verdict:
    """The verdict. ``final`` maps every acknowledged job id to its status in
    the shards at the end (``ABSENT`` when no table holds it); ``due_by``: a
    job due after this instant is not expected to have fired yet."""
    verdict = Verdict(seed=seed, operations=len(operations))
    verdict.faults = dict(Counter(f.kind for f in faults))
    jobs = _jobs(operations)
    by_job: dict[str, list[Firing]] = defaultdict(list)
    for firing in firings:
        by_job[firing.job].append(firing)

    doubled = [k for k, n in Counter((f.job, f.attempt) for f in firings).items() if n > 1]
    verdict.doubled_firings = len(doubled)

    slots: dict[tuple[str, float], set[str]] = defaultdict(set)
    for f in firings:
        if f.cron is not None:
            slots[(f.cron, f.scheduled_for)].add(f.job)
    doubled_slots = sorted(k for k, ids in slots.items() if len(ids) > 1)
    verdict.doubled_cron_slots = len(doubled_slots)

    early: list[tuple[str, float]] = []
    for f in firings:
        if f.cron is not None:
            bound = f.scheduled_for
        elif f.job in jobs and jobs[f.job].run_ats:
            bound = min(jobs[f.job].run_ats)
        else:
            continue  # a job whose create the history does not name
        if f.at < bound:
            early.append((f.job, round(bound - f.at, 6)))
    verdict.early_firings = len(early)

    acked = sorted(job_id for job_id, job in jobs.items() if job.acked)
    missing = [j for j in acked if final.get(j, ABSENT) == ABSENT]
    verdict.missing_acknowledged_creates = len(missing)

    lost: list[str] = []
    dead: list[str] = []
    for job_id in acked:
        job = jobs[job_id]
        if job.cancel_acked_at is not None or final.get(job_id) == "CANCELLED":
            continue
        if any(200 <= f.status < 300 for f in by_job.get(job_id, ())):
            continue
        if final.get(job_id) == "FAILED":
            dead.append(job_id)
        elif max(job.run_ats, default=0.0) <= due_by:
            lost.append(job_id)
    verdict.lost_jobs = len(lost)

    after_cancel = sorted(
        job_id
        for job_id, job in jobs.items()
        if job.cancel_acked_at is not None
        and any(f.at > job.cancel_acked_at for f in by_job.get(job_id, ()))
    )
    verdict.fired_after_cancel = len(after_cancel)

    # Lateness of each job's first firing, and of each cron slot's, outside
    # the fault windows: the "99 % within 5 s of runAt".
    lateness: list[float] = []
    every: list[float] = []  # faults or not
    for job_id, job in jobs.items():
        got = by_job.get(job_id)
        if got and job.acked_run_ats and not job.cancel_acked_at:
            due = max(job.acked_run_ats)
            every.append(min(f.at for f in got) - due)
            if not _in_fault_window(due, faults):
                lateness.append(every[-1])
    for (_, scheduled_for), ids in slots.items():
        if not _in_fault_window(scheduled_for, faults):
            first = min(f.at for i in ids for f in by_job[i])
            lateness.append(first - scheduled_for)
    on_time = sum(1 for s in lateness if s <= ON_TIME_SECONDS)
    verdict.details = {
        "acknowledged_creates": len(acked),
        "firings": len(firings),
        "cron_slots_fired": len(slots),
        "dead_lettered": len(dead),
        "early_max_seconds": max((e for _, e in early), default=0.0),
        "lateness_seconds": _quantiles(every),
        "on_time_outside_faults": {
            "firings": len(lateness),
            "within_5s": on_time,
            "fraction": round(on_time / len(lateness), 4) if lateness else None,
        },
        "examples": {
            name: values[:10]
            for name, values in (
                ("lost_jobs", lost),
                ("doubled_firings", [list(k) for k in doubled]),
                ("doubled_cron_slots", [list(k) for k in doubled_slots]),
                ("early_firings", early),
                ("missing_acknowledged_creates", missing),
                ("fired_after_cancel", after_cancel),
            )
            if values
        },
    }
    return verdict
