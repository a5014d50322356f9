"""The fault campaign's checker on hand-made histories: each count is made
non-zero by a history built to break exactly that promise, and a history
that at-least-once allows (a redelivery at a higher attempt, a cancel that
lost the race to a claim, a patch that was not acknowledged) stays clean."""

from __future__ import annotations

from pathlib import Path

from benchmarks.campaign.checker import ABSENT, Verdict, check
from benchmarks.campaign.history import (
    Fault,
    Firing,
    Operation,
    Recorder,
    read_records,
)

T0 = 1_000_000.0
A, B = "job_A", "job_B"


def create(
    job: str, run_at: float, *, ack: bool = True, op: int = 1, key: str | None = None
) -> Operation:
    return Operation(
        op, "create", T0, T0 + 0.1, ack, 201 if ack else None, job if ack else None, key, run_at
    )


def fired(
    job: str,
    at: float,
    attempt: int = 1,
    status: int = 200,
    *,
    cron: str | None = None,
    scheduled_for: float | None = None,
) -> Firing:
    return Firing(at, job, attempt, scheduled_for or at, status, cron=cron)


def verdict(
    ops: list[Operation],
    firings: list[Firing],
    final: dict[str, str] | None = None,
    faults: list[Fault] | None = None,
) -> Verdict:
    state = final if final is not None else {o.job: "SUCCEEDED" for o in ops if o.job}
    return check(ops, firings, faults or [], state, seed=7, due_by=T0 + 100)


def test_a_clean_history_counts_nothing_and_at_least_once_is_allowed() -> None:
    ops = [create(A, T0 + 5), create(B, T0 + 5, op=2)]
    # A: attempt 1 failed (503), attempt 2 succeeded; B: its lease expired
    # during attempt 1 and attempt 2 fired again: a redelivery, not a doubling.
    firings = [
        fired(A, T0 + 5.2, 1, 503),
        fired(A, T0 + 6, 2),
        fired(B, T0 + 5.1, 1),
        fired(B, T0 + 9, 2),
    ]
    v = verdict(ops, firings)
    assert v.clean and v.operations == 2
    assert v.as_dict()["acknowledged_creates"] == 2
    assert v.as_dict()["on_time_outside_faults"] == {"firings": 2, "within_5s": 2, "fraction": 1.0}
    assert v.as_dict()["lateness_seconds"] == {"p50": 0.2, "p99": 0.2, "max": 0.2}


def test_lost_job() -> None:
    ops = [create(A, T0 + 5), create(B, T0 + 5, op=2)]
    v = verdict(ops, [fired(A, T0 + 6)], final={A: "SUCCEEDED", B: "SCHEDULED"})
    assert v.lost_jobs == 1 and v.details["examples"]["lost_jobs"] == [B]
    # Fired only with 503s: still lost; dead-lettered (FAILED) is counted apart.
    v = verdict(
        ops, [fired(A, T0 + 6), fired(B, T0 + 6, 1, 503)], final={A: "SUCCEEDED", B: "FAILED"}
    )
    assert v.lost_jobs == 0 and v.details["dead_lettered"] == 1
    # Due after the deadline: not expected yet.
    v = verdict([create(A, T0 + 500)], [], final={A: "SCHEDULED"})
    assert v.lost_jobs == 0


def test_doubled_firing_is_one_attempt_received_twice() -> None:
    v = verdict([create(A, T0 + 5)], [fired(A, T0 + 5.1, 1), fired(A, T0 + 5.3, 1)])
    assert v.doubled_firings == 1 and v.details["examples"]["doubled_firings"] == [[A, 1]]


def test_doubled_cron_slot_is_one_slot_fired_as_two_jobs() -> None:
    slot = T0 + 60
    firings = [
        fired("occ1", slot + 0.1, cron="c", scheduled_for=slot),
        fired("occ2", slot + 0.2, cron="c", scheduled_for=slot),
        fired("occ3", slot + 60.1, cron="c", scheduled_for=slot + 60),
        fired("occ3", slot + 63, 2, cron="c", scheduled_for=slot + 60),
    ]
    v = verdict([], firings)
    assert v.doubled_cron_slots == 1 and v.doubled_firings == 0


def test_early_firing_against_the_earliest_runat_asked_for() -> None:
    patch = Operation(
        2, "patch", T0 + 1, T0 + 12, False, None, A, None, T0 + 3
    )  # not acked, applied
    v = verdict([create(A, T0 + 5), patch], [fired(A, T0 + 3.5)])
    assert v.early_firings == 0  # the unacknowledged patch may have moved it to T0+3
    v = verdict([create(A, T0 + 5)], [fired(A, T0 + 4.998)])
    assert v.early_firings == 1
    early_cron = fired("occ", T0 + 59.9, cron="c", scheduled_for=T0 + 60)
    assert verdict([], [early_cron]).early_firings == 1


def test_missing_acknowledged_create() -> None:
    ops = [create(A, T0 + 5), create(B, T0 + 5, op=2)]
    v = verdict(ops, [fired(A, T0 + 6), fired(B, T0 + 6)], final={A: "SUCCEEDED", B: ABSENT})
    assert v.missing_acknowledged_creates == 1
    # A create that was never acknowledged may be absent.
    assert verdict([create(A, T0 + 5, ack=False)], [], final={}).missing_acknowledged_creates == 0


def test_fired_after_an_acknowledged_cancel() -> None:
    cancel = Operation(2, "cancel", T0 + 1, T0 + 1.2, True, 200, A)
    v = verdict([create(A, T0 + 5), cancel], [fired(A, T0 + 5.1)], final={A: "CANCELLED"})
    assert v.fired_after_cancel == 1 and v.lost_jobs == 0
    # A cancel that was refused (409: already running) permits the firing.
    refused = Operation(2, "cancel", T0 + 5, T0 + 5.2, False, 409, A)
    assert verdict([create(A, T0 + 5), refused], [fired(A, T0 + 5.1)]).clean


def test_keyed_retry_ties_an_unacknowledged_create_to_its_job() -> None:
    first = Operation(1, "create", T0, T0 + 10, False, None, None, "k1", T0 + 2)
    retry = Operation(2, "create_retry", T0 + 10.5, T0 + 10.6, True, 200, A, "k1", T0 + 2)
    v = verdict([first, retry], [fired(A, T0 + 2.1)])
    assert v.clean and v.details["acknowledged_creates"] == 1


def test_faults_are_counted_by_kind_and_their_windows_left_out_of_lateness() -> None:
    faults = [
        Fault("worker_kill", "worker-0", T0 + 4, T0 + 6),
        Fault("worker_kill", "worker-1", T0 + 50, T0 + 51),
        Fault("zk_restart", "zk", T0 + 30, T0 + 31),
    ]
    v = verdict([create(A, T0 + 5)], [fired(A, T0 + 20)], faults=faults)
    assert v.faults == {"worker_kill": 2, "zk_restart": 1}
    assert v.details["on_time_outside_faults"]["firings"] == 0
    assert v.as_dict()["faults"] == {"worker_kill": 2, "zk_restart": 1}


def test_history_files_round_trip_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "ops.jsonl"
    recorder = Recorder(path)
    recorder.add(create(A, T0 + 5))
    recorder.close()
    with open(path, "a") as f:
        f.write('{"id": 2, "kind": "cre')  # a writer killed mid-line
    assert read_records(path, Operation) == [create(A, T0 + 5)]
