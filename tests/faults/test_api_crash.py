"""The API process is SIGKILLed while creates are in flight, and a new one
takes its port.

Invariants: every create that got a 2xx is a job (and succeeds once); every
create left without an answer, sent again with its key, finds its job or
makes it: one job per key, never two. The time until the new process served
its first create is printed.
"""

from __future__ import annotations

import time

import httpx
import pytest

import shardmap
from tests.helpers import wait_for
from tests.load import Load
from tests.procs import TOKEN, FaultSink, ProcessHarness
from tests.shards import rows

pytestmark = pytest.mark.faults


def test_a_killed_api_loses_no_create_it_answered(procs: ProcessHarness, sink: FaultSink) -> None:
    dsns = procs.shards
    api = procs.api()
    worker = procs.worker("worker-a")
    api.wait_ready()
    worker.wait_ready()

    with Load(api.base_url, sink.url) as load:
        wait_for(lambda: len(load.answers) >= 200, timeout=30, what="load before the kill")
        api.sigkill()
        killed = time.monotonic()
        before = len(load.answers)
        time.sleep(1)
        # The new process takes the old one's port: the clients do not change.
        again = procs.api("api-2", start=False, api_port=api.port)
        again.port = api.port
        again.start().wait_ready()
        wait_for(
            lambda: len(load.answers) > before + 100, timeout=30, what="load on the new process"
        )
    back = min((t for t in load.created_at if t > killed), default=float("nan")) - killed
    unanswered = [k for k, (status, _) in load.answers.items() if status == 0]
    assert unanswered, "the kill left no create without an answer: it was not under load"
    assert {status for status, _ in load.answers.values()} <= {0, 200, 201}
    answered = {k: job for k, (_, job) in load.answers.items() if job}

    with httpx.Client(
        base_url=again.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    ) as client:
        retried = {}
        for key in unanswered:
            resp = client.post(
                "/api/v1/jobs", json=load.body(key), headers={"Idempotency-Key": key}
            )
            assert resp.status_code in (200, 201), resp.text
            retried[key] = resp.json()["jobId"]
        # A create answered before the kill is found again under its key.
        for key in list(answered)[-50:]:
            resp = client.post(
                "/api/v1/jobs", json=load.body(key), headers={"Idempotency-Key": key}
            )
            assert resp.status_code == 200 and resp.json()["jobId"] == answered[key], resp.text
    jobs = {**answered, **retried}
    assert len(jobs) == len(load.answers)

    def by_key() -> dict[str, list[tuple[str, str]]]:
        found = rows(dsns, "SELECT idempotency_key, id, status FROM job_history")
        found += rows(dsns, "SELECT idempotency_key, id, status FROM jobs")
        found += rows(dsns, "SELECT idempotency_key, id, status FROM jobs_far")
        out: dict[str, list[tuple[str, str]]] = {}
        for key, job_id, status in found:
            out.setdefault(key, []).append((shardmap.encode_id("job", job_id), status))
        return out

    expected = {key: [(job, "SUCCEEDED")] for key, job in jobs.items()}
    wait_for(lambda: by_key() == expected, timeout=60, what="one succeeded job per key")
    print(
        f"\nAPI SIGKILL: {len(load.answers)} keyed creates, {len(unanswered)} left without an "
        f"answer; the new process created its first job {back:.2f} s after the kill"
    )
