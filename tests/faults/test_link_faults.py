"""Faults of the link between Vakit and one shard, injected with the TCP
proxy of ``tests/tcpproxy.py`` between the processes and that shard's
PostgreSQL (the session's servers; the databases are this test's own).

* A partition (:meth:`TcpProxy.blackhole`): packets are dropped, not refused,
  and every socket stays open, so only the client's own deadline ends a wait.
  Requests for that shard get a 503 within a bounded time, the other shard
  keeps serving (API and worker), and nothing is lost when the link heals.
* An ambiguous commit (:meth:`TcpProxy.drop_after`): the link drops right
  after the statement that commits a create was forwarded, so the server
  commits and the API never hears of it. A create is still exactly one job.

Recovery times are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

import shardmap
from tests.faults.test_worker_faults import (
    SHARD_MAP,
    assert_unavailable,
    attempt_log,
    finished,
    history,
    hot_rows,
    key_on,
    text_id,
)
from tests.helpers import wait_for
from tests.procs import TOKEN, FaultSink, ProcessHarness, running_processes
from tests.shards import api_body, create_jobs, job_on, rows
from tests.tcpproxy import TcpProxy

pytestmark = pytest.mark.faults

CUT = 1  # the shard behind the proxy
UP = 0
# Short, so a cut link costs seconds: a request gets statement_timeout +
# connect_timeout before its connection is severed.
LINK_SETTINGS = {"statement_timeout": "2", "connect_timeout": "1"}
BOUND = 2 + 1


def through(dsn: str, proxy: TcpProxy) -> str:
    """``dsn`` with the proxy's port instead of the server's."""
    port = urlsplit(dsn).port
    return dsn.replace(f":{port}/", f":{proxy.port}/", 1)


@pytest.fixture
def link(shard_dsns: list[str]) -> Iterator[TcpProxy]:
    """A proxy in front of shard :data:`CUT`."""
    with TcpProxy("127.0.0.1", int(urlsplit(shard_dsns[CUT]).port or 5432)) as proxy:
        yield proxy


@pytest.fixture
def linked(shard_dsns: list[str], link: TcpProxy, tmp_path: Path) -> Iterator[ProcessHarness]:
    """Processes that reach shard :data:`CUT` only through :func:`link`."""
    dsns = list(shard_dsns)
    dsns[CUT] = through(dsns[CUT], link)
    with running_processes(dsns, tmp_path) as harness:
        harness.settings.update(LINK_SETTINGS)
        yield harness


def timed(call: object) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    resp = call() if callable(call) else call
    assert isinstance(resp, httpx.Response)
    return resp, time.monotonic() - started


def test_partitioned_shard_costs_a_bounded_wait_and_the_other_keeps_serving(
    shard_dsns: list[str], link: TcpProxy, linked: ProcessHarness, sink: FaultSink
) -> None:
    api = linked.api()
    worker = linked.worker("worker-a")
    api.wait_ready()
    worker.wait_ready()

    now = datetime.now(UTC)
    before = [job_on(SHARD_MAP, s, sink.url, run_at=now - timedelta(seconds=1)) for s in (UP, CUT)]
    # Fired before the cut and answered during it. The one on the cut shard
    # cannot beat or write its outcome; the one on the other shard must keep
    # its lease all along (its heartbeats do not wait for the cut shard's).
    held_up = job_on(SHARD_MAP, UP, sink.url, payload={"sleep": 6.0}, run_at=now)
    held_cut = job_on(SHARD_MAP, CUT, sink.url, payload={"sleep": 3.0}, run_at=now)
    during_up = [job_on(SHARD_MAP, UP, sink.url, run_at=now + timedelta(seconds=d)) for d in (5, 7)]
    during_cut = [
        job_on(SHARD_MAP, CUT, sink.url, run_at=now + timedelta(seconds=d)) for d in (5, 7)
    ]
    jobs = [*before, held_up, held_cut, *during_up, *during_cut]
    create_jobs(shard_dsns, jobs)  # straight to the servers, not through the proxy
    wait_for(lambda: finished(shard_dsns, before) == len(before), timeout=20, what="the first jobs")
    wait_for(
        lambda: {text_id(held_up), text_id(held_cut)} <= sink.job_ids(),
        timeout=20,
        what="the long jobs to fire",
    )

    client = httpx.Client(
        base_url=api.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
    )
    with client:
        link.blackhole()
        cut_at = time.monotonic()
        [on_cut] = [text_id(p) for p in before if SHARD_MAP.shard_of(p.id) == CUT]
        [on_up] = [text_id(p) for p in before if SHARD_MAP.shard_of(p.id) == UP]
        waits = []
        for _ in range(2):  # a pooled connection, then a new one
            resp, took = timed(lambda: client.get(f"/api/v1/jobs/{on_cut}"))
            assert_unavailable(resp, CUT)
            waits.append(took)
        body = api_body(sink.url, datetime.now(UTC))
        resp, took = timed(
            lambda: client.post(
                "/api/v1/jobs", json=body, headers={"Idempotency-Key": key_on(CUT, "cut")}
            )
        )
        assert_unavailable(resp, CUT)
        waits.append(took)
        # The other shard serves as before.
        resp = client.get(f"/api/v1/jobs/{on_up}")
        assert resp.status_code == 200 and resp.json()["status"] == "SUCCEEDED", resp.text
        up_key = key_on(UP, "up")
        created = client.post("/api/v1/jobs", json=body, headers={"Idempotency-Key": up_key})
        assert created.status_code == 201, created.text
        # The worker keeps firing the shard it reaches, long jobs included.
        wait_for(
            lambda: finished(shard_dsns, [*during_up, held_up]) == 3,
            timeout=20,
            what="the reachable shard's jobs to finish during the cut",
        )
        assert finished(shard_dsns, during_cut) == 0
        assert attempt_log(shard_dsns, held_up) == [(1, "SUCCEEDED", "worker-a")]
        assert worker.alive() and api.alive()
        time.sleep(max(0.0, cut_at + 10 - time.monotonic()))  # the partition is the fault

        link.restore()
        healed = time.monotonic()
        wait_for(
            lambda: client.get(f"/api/v1/jobs/{on_cut}").status_code == 200,
            timeout=30,
            what="the API to reach the healed shard",
        )
        api_back = time.monotonic() - healed
        wait_for(lambda: finished(shard_dsns, jobs) == len(jobs), timeout=60, what="every job")
        jobs_back = time.monotonic() - healed
        job_id = created.json()["jobId"]
        wait_for(
            lambda: client.get(f"/api/v1/jobs/{job_id}").json().get("status") == "SUCCEEDED",
            timeout=30,
            what="the job created during the cut",
        )

    for job_id, found in history(shard_dsns, jobs).items():
        assert [status for status, _ in found] == ["SUCCEEDED"], (job_id, found)
    assert hot_rows(shard_dsns) == []
    # The cut shard's in-flight job: its outcome was written once the link
    # healed, or its lease ran out and a later attempt succeeded (a claim
    # the partition held back may run when it heals, unanswered: one more
    # expired lease). Never two successes, never an outcome out of order.
    log = attempt_log(shard_dsns, held_cut)
    assert [a for a, _, _ in log] == list(range(1, len(log) + 1)), log
    assert [o for _, o, _ in log] == ["LEASE_EXPIRED"] * (len(log) - 1) + ["SUCCEEDED"], log
    assert worker.alive() and api.alive()
    print(
        f"\npartition of shard {CUT}: API answers for it took {', '.join(f'{w:.2f}' for w in waits)} s "
        f"(bound {BOUND} s); after the heal the API served it in {api_back:.2f} s and every job "
        f"was done in {jobs_back:.2f} s; the cut shard's in-flight job: {log}"
    )


@pytest.fixture
def links(shard_dsns: list[str]) -> Iterator[list[TcpProxy]]:
    """A proxy in front of every shard."""
    proxies = [TcpProxy("127.0.0.1", int(urlsplit(d).port or 5432)) for d in shard_dsns]
    try:
        yield [p.start() for p in proxies]
    finally:
        for p in proxies:
            p.stop()


def lose_answers(links: list[TcpProxy], pattern: bytes | None) -> None:
    """Arm every proxy for one lost answer after ``pattern``; None disarms."""
    for proxy in links:
        proxy.drop_reply_after(pattern or b"-", 1 if pattern else 0)


def every_job_id(dsns: list[str]) -> list[str]:
    found = rows(
        dsns,
        "SELECT id FROM jobs UNION ALL SELECT id FROM jobs_far UNION ALL SELECT id FROM job_history",
    )
    return sorted(shardmap.encode_id("job", r[0]) for r in found)


def test_a_create_whose_commit_answer_is_lost_is_exactly_one_job(
    shard_dsns: list[str], links: list[TcpProxy], tmp_path: Path, sink: FaultSink
) -> None:
    # Only the API goes through the proxies: the answers lost are its own.
    proxied = [through(d, p) for d, p in zip(shard_dsns, links, strict=True)]
    with (
        running_processes(proxied, tmp_path) as procs,
        running_processes(shard_dsns, tmp_path) as direct,
    ):
        procs.settings.update(LINK_SETTINGS)
        api = procs.api()
        worker = direct.worker("worker-a")
        api.wait_ready()
        worker.wait_ready()
        client = httpx.Client(
            base_url=api.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
        )
        made: list[str] = []
        answers = []
        with client:
            for i in range(3):
                # Whichever shard the keyless create lands on, the insert
                # commits there and its answer is lost.
                lose_answers(links, b"INSERT INTO jobs")
                body = api_body(sink.url, datetime.now(UTC) + timedelta(seconds=1), {"n": i})
                resp, took = timed(lambda body=body: client.post("/api/v1/jobs", json=body))
                lose_answers(links, None)
                assert len(every_job_id(shard_dsns)) == len(made) + 1, "one create, one job"
                assert resp.status_code == 201, resp.text
                made.append(resp.json()["jobId"])
                answers.append(took)
            # A keyed create whose COMMIT's answer is lost: the retry finds
            # its own job under the key (201); a repeat by the client, 200.
            lose_answers(links, b"COMMIT")
            body = api_body(sink.url, datetime.now(UTC) + timedelta(seconds=1), {"keyed": 1})
            headers = {"Idempotency-Key": "ambiguous-commit"}
            resp, took = timed(lambda: client.post("/api/v1/jobs", json=body, headers=headers))
            lose_answers(links, None)
            assert resp.status_code == 201, resp.text
            answers.append(took)
            again = client.post("/api/v1/jobs", json=body, headers=headers)
            assert again.status_code == 200 and again.json()["jobId"] == resp.json()["jobId"]
            made.append(resp.json()["jobId"])
            # The fault happened each time: an answer was lost per create.
            assert sum(p.dropped_replies for p in links) == 4

            assert every_job_id(shard_dsns) == sorted(made)
            for job_id in made:

                def succeeded(job_id: str = job_id) -> bool:
                    found = client.get(f"/api/v1/jobs/{job_id}").json()
                    return bool(found.get("status") == "SUCCEEDED")

                wait_for(succeeded, timeout=30, what=f"{job_id} to succeed")
        assert every_job_id(shard_dsns) == sorted(made)
        assert {job: len(firings) for job, firings in sink.by_job().items()} == dict.fromkeys(
            made, 1
        )
        print(
            "\nambiguous commits: each create answered in "
            f"{', '.join(f'{a:.2f}' for a in answers)} s after its lost answer"
        )


def test_creates_sent_together_whose_answer_is_lost_are_each_exactly_one_job(
    shard_dsns: list[str], links: list[TcpProxy], tmp_path: Path, sink: FaultSink
) -> None:
    # Keyless single creates that arrive while others are being written go
    # to their shard as one statement (cluster/store/coalesce.py). That
    # statement commits and its answer is lost: each create is settled on
    # its own, by its id, and answered once; no job is made twice.
    proxied = [through(d, p) for d, p in zip(shard_dsns, links, strict=True)]
    with running_processes(proxied, tmp_path) as procs:
        procs.settings.update(LINK_SETTINGS)
        api = procs.api()
        api.wait_ready()
        lose_answers(links, b"jsonb_array_elements")  # the batch statement only
        run_at = datetime.now(UTC) + timedelta(hours=1)

        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(
                base_url=api.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
            ) as client:
                return await asyncio.gather(
                    *(client.post("/api/v1/jobs", json=api_body(sink.url, run_at, {"n": i}))
                      for i in range(60))
                )  # fmt: skip

        answers = asyncio.run(burst())
        lose_answers(links, None)
        assert [r.status_code for r in answers] == [201] * 60, [r.text for r in answers if r.status_code != 201]
        # The fault happened: a statement of creates sent together lost its answer.
        assert sum(p.dropped_replies for p in links) >= 1
        made = sorted(r.json()["jobId"] for r in answers)
        assert len(set(made)) == 60
        assert every_job_id(shard_dsns) == made
