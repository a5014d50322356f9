"""The Python SDK (clients/python) against a live API and worker on real
shards: jobs created, found, cancelled and retried, a refused call raising
the exception of its problem type, every page of a search, crons kept as
code, a real firing verified, and the package installed into a fresh venv
and driven by a script that imports nothing else."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from vakit_client import (
    AsyncClient,
    Client,
    Conflict,
    InvalidRequest,
    NotFound,
    ProblemError,
    Unauthorized,
    verify_firing,
)

from cluster.local.childproc import find_free_port
from cluster.local.pgserver import PgServer
from tests.helpers import Sink, start_sink, wait_for
from tests.procs import REPO, ProcessHarness, VakitProcess, processes_on_fresh_shards
from tests.procs import TOKEN as OPERATOR_TOKEN

pytestmark = pytest.mark.integration

TOKEN, OWNER = "sdk-token", "sdk-team"
SECRET = "whsec_c2RrLXRlc3Qtc2lnbmluZy1zZWNyZXQtMzJi"
UV = REPO / ".uv" / "bin" / "uv"


@pytest.fixture(scope="module")
def harness(pg_servers: list[PgServer], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessHarness]:
    settings = {"api_tokens": f"{TOKEN}={OWNER}", "signing_secrets": f"{OWNER}={SECRET}"}
    with processes_on_fresh_shards(pg_servers, tmp_path_factory.mktemp("sdk-logs"), **settings) as procs:
        yield procs


@pytest.fixture(scope="module")
def api(harness: ProcessHarness) -> VakitProcess:
    return harness.api().wait_ready()


@pytest.fixture(scope="module")
def worker(harness: ProcessHarness) -> VakitProcess:
    return harness.worker("sdk-w1").wait_ready()


@pytest.fixture(scope="module")
def sink() -> Iterator[Sink]:
    s = start_sink()
    yield s
    s.close()


@pytest.fixture
def client(api: VakitProcess) -> Iterator[Client]:
    with Client(api.base_url, TOKEN) as c:
        yield c


def test_create_find_cancel_and_a_refused_call(api: VakitProcess, client: Client, sink: Sink) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    target = {"kind": "HTTP", "url": sink.url}
    job = client.create_job(type="sdk.cancel", run_at=later, target=target, payload={"n": 1})
    assert job.status == "SCHEDULED" and not job.replayed
    got = client.get_job(job.id)
    assert (got.id, got.status, got.payload, got.idempotency_key) == (
        job.id, "SCHEDULED", {"n": 1}, job.idempotency_key,
    )  # fmt: skip
    assert abs(got.run_at - later) < timedelta(milliseconds=1)
    # The caller's own key: a repeat is the first job.
    first = client.create_job(type="sdk.cancel", run_at=later, target=target, idempotency_key="order-1")
    again = client.create_job(type="sdk.cancel", run_at=later, target=target, idempotency_key="order-1")
    assert again.id == first.id and again.replayed
    assert {j.id for j in client.search_jobs(status="SCHEDULED", type="sdk.cancel")} == {job.id, first.id}

    moved = client.reschedule_job(job.id, later + timedelta(minutes=5))
    assert moved.run_at == got.run_at + timedelta(minutes=5) and moved.scheduled_for == got.scheduled_for
    paused = client.pause_job(job.id, "waiting for payment")
    assert paused.paused and paused.raw["pauseReason"] == "waiting for payment"
    assert client.resume_job(job.id).paused is False

    assert client.cancel_job(job.id).status == "CANCELLED"
    with pytest.raises(Conflict) as conflict:
        client.cancel_job(job.id)
    assert conflict.value.type == "/problems/conflict" and conflict.value.status == 409
    with pytest.raises(InvalidRequest) as invalid:
        client.create_job(type="sdk.cancel", run_at="tomorrow", target=target)
    assert (invalid.value.type, invalid.value.status) == ("/problems/invalid-request", 422)
    assert "runAt" in invalid.value.detail
    # Another owner's job (the operator token acts as its own owner): 404.
    with Client(api.base_url, OPERATOR_TOKEN) as other_owner:
        theirs = other_owner.create_job(type="sdk.cancel", run_at=later, target=target)
    with pytest.raises(NotFound) as missing:
        client.get_job(theirs.id)
    assert missing.value.type == "/problems/not-found"
    with pytest.raises(ProblemError) as other:  # the key reused with another body
        client.create_job(type="sdk.other", run_at=later, target=target, idempotency_key="order-1")
    assert other.value.type == "/problems/idempotency-key-reused"


def test_calendars_and_limits(api: VakitProcess, client: Client) -> None:
    made = client.create_calendar(
        "sdk-holidays", time_zone="Europe/Istanbul", exclude_dates=[date(2027, 1, 1), "2027-04-23"]
    )
    assert (made.version, made.exclude_dates) == (1, [date(2027, 1, 1), date(2027, 4, 23)])
    assert made.business_week == ["MON", "TUE", "WED", "THU", "FRI"]
    again = client.create_calendar(
        "sdk-holidays", time_zone="Europe/Istanbul", exclude_dates=["2027-01-01", "2027-04-23"]
    )
    assert again.version == 1  # the same days: the same calendar
    with pytest.raises(Conflict):
        client.create_calendar("sdk-holidays", time_zone="UTC")
    changed = client.replace_calendar(
        "sdk-holidays", time_zone="Europe/Istanbul", exclude_dates=["2027-01-01"],
        include_dates=[date(2027, 1, 9)], business_week=["MON", "TUE", "WED", "THU", "FRI", "SAT"],
    )  # fmt: skip
    assert changed.version == 2 and changed.include_dates == [date(2027, 1, 9)]
    assert [c.name for c in client.list_calendars()] == ["sdk-holidays"]
    assert client.get_calendar("sdk-holidays").business_week[-1] == "SAT"
    client.delete_calendar("sdk-holidays")
    with pytest.raises(NotFound):
        client.get_calendar("sdk-holidays")

    # Limits: an operator's (a tenant's token is refused).
    with pytest.raises(ProblemError) as refused:
        client.list_limits()
    assert refused.value.status == 403
    with Client(api.base_url, OPERATOR_TOKEN) as operator:
        limits = operator.set_limit("sdk.example.com", concurrency=4, rate=40.0)
        mine = [x for x in limits if x.key == "sdk.example.com"]
        assert [(x.concurrency, x.rate, x.source) for x in mine] == [(4, 40.0, "runtime")]
        assert mine[0].consistent and mine[0].effective_concurrency == 4
        assert any(x.key == "sdk.example.com" for x in operator.list_limits())
        assert all(x.key != "sdk.example.com" for x in operator.unset_limit("sdk.example.com"))


def test_a_batch_and_a_search_over_every_page(client: Client, sink: Sink) -> None:
    later = datetime.now(UTC) + timedelta(hours=2)
    specs = [
        {"type": "sdk.page", "run_at": later + timedelta(seconds=n), "target": {"kind": "HTTP", "url": sink.url}}
        for n in range(7)
    ]
    items = client.create_jobs([*specs, {**specs[0], "max_attempts": 0}])
    assert [i.status for i in items] == [201] * 7 + [422]
    assert isinstance(items[-1].error, InvalidRequest) and all(i.ok for i in items[:7])
    # Sent again: every job has its key, so each is answered with the first.
    repeat = client.create_jobs([{**s, "idempotency_key": i.idempotency_key} for s, i in zip(specs, items, strict=False)])
    assert [r.job_id for r in repeat] == [i.job_id for i in items[:7]] and {r.status for r in repeat} == {200}

    found = list(client.search_jobs(type="sdk.page", page_size=3))
    assert sorted(j.id for j in found) == sorted(i.job_id for i in items[:7] if i.job_id)
    assert len(found) == 7  # three pages, nothing twice


def test_a_failed_job_is_retried_and_its_firing_verifies(client: Client, worker: VakitProcess, sink: Sink) -> None:
    job = client.create_job(
        type="sdk.retry", run_at=datetime.now(UTC), target={"kind": "HTTP", "url": sink.url},
        payload={"status": 400}, max_attempts=2,
    )  # fmt: skip
    wait_for(lambda: client.get_job(job.id).status == "FAILED", what="the job to fail")
    [firing] = sink.by_job()[job.id]
    verified = verify_firing(firing.body, firing.headers, SECRET)
    assert (verified.job_id, verified.attempt, verified.payload) == (job.id, 1, {"status": 400})
    assert verified.idempotency_key == firing.idempotency_key

    retried = client.retry_job(job.id)
    assert retried.id == job.id and retried.status in ("SCHEDULED", "RUNNING")
    wait_for(lambda: (j := client.get_job(job.id)).status == "FAILED" and j.attempt == 2,
             what="the retried job's second attempt")  # fmt: skip
    assert len(sink.by_job()[job.id]) == 2
    assert [j.id for j in client.search_jobs(status="FAILED", type="sdk.retry")] == [job.id]


def test_crons_as_code_preview_pause_trigger_and_backfill(client: Client, sink: Sink) -> None:
    target = {"kind": "HTTP", "url": sink.url}
    hourly = {"name": "sdk.hourly", "schedule": "0 * * * *", "time_zone": "UTC", "target": target}
    nightly = {"name": "sdk.nightly", "schedule": "0 2 * * *", "time_zone": "Europe/Istanbul", "target": target}
    changes = client.apply_crons([hourly, nightly], owns="sdk.")
    assert [(c.action, c.name) for c in changes] == [("create", "sdk.hourly"), ("create", "sdk.nightly")]
    assert [c.action for c in client.apply_crons([hourly, nightly], owns="sdk.")] == ["unchanged"] * 2
    crons = {c.name: c for c in client.list_crons()}
    cron = crons["sdk.hourly"]

    fires = client.preview_cron(cron.id, count=3).fires
    assert len(fires) == 3 and all(f.scheduled_for.minute == 0 for f in fires)
    assert client.pause_cron(cron.id, "maintenance").pause_reason == "maintenance"
    assert client.resume_cron(cron.id).paused is False
    triggered = client.trigger_cron(cron.id)
    assert client.get_job(triggered.job_id).cron_job_id == cron.id

    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    filled = client.backfill_cron(cron.id, hour - timedelta(hours=3), hour - timedelta(minutes=1))
    assert (filled.created, filled.existing) == (3, 0) and filled.next_from is None
    assert client.backfill_cron(cron.id, hour - timedelta(hours=3), hour - timedelta(minutes=1)).existing == 3

    # Changed in code: updated; left out of the code: pruned.
    changed = client.apply_crons([{**hourly, "max_attempts": 7}], owns="sdk.", prune=True)
    assert [(c.action, c.name) for c in changed] == [("update", "sdk.hourly"), ("delete", "sdk.nightly")]
    assert changed[0].fields == {"maxAttempts": 7}
    assert client.get_cron(cron.id).raw["maxAttempts"] == 7
    with pytest.raises(NotFound):
        client.get_cron(crons["sdk.nightly"].id)
    assert client.update_cron(cron.id, jitter_seconds=30).raw["jitterSeconds"] == 30
    client.delete_cron(cron.id)
    assert [c.name for c in client.list_crons() if c.name.startswith("sdk.")] == []


async def test_the_async_client(api: VakitProcess, sink: Sink) -> None:
    async with AsyncClient(api.base_url, TOKEN) as client:
        job = await client.create_job(
            type="sdk.async", run_at=datetime.now(UTC) + timedelta(hours=1),
            target={"kind": "HTTP", "url": sink.url},
        )  # fmt: skip
        assert (await client.get_job(job.id)).status == "SCHEDULED"
        assert [j.id async for j in client.search_jobs(type="sdk.async", page_size=1)] == [job.id]
        assert (await client.cancel_job(job.id)).status == "CANCELLED"
    async with AsyncClient(api.base_url, "not-a-token") as stranger:
        with pytest.raises(Unauthorized):
            await stranger.get_job(job.id)


SCRIPT = """
import sys
from datetime import UTC, datetime, timedelta
from vakit_client import Client, InvalidRequest, ProblemError

try:
    import cluster  # noqa: F401
except ImportError:
    pass
else:
    sys.exit("the server's package is importable: not a fresh venv")

url, token, sink = sys.argv[1:]
with Client(url, token) as vakit:
    job = vakit.create_job(type="fresh.venv", run_at=datetime.now(UTC) + timedelta(hours=1),
                           target={"kind": "HTTP", "url": sink}, payload={"from": "script"})
    assert [j.id for j in vakit.search_jobs(type="fresh.venv")] == [job.id]
    assert vakit.cancel_job(job.id).status == "CANCELLED"
    assert vakit.retry_job(job.id).status == "SCHEDULED"
    vakit.cancel_job(job.id)
    cron = vakit.create_cron(name="fresh.hourly", schedule="0 * * * *", time_zone="UTC",
                             target={"kind": "HTTP", "url": sink})
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    assert vakit.backfill_cron(cron.id, hour - timedelta(hours=2), hour - timedelta(minutes=1)).created == 2
    try:
        vakit.create_job(type="fresh.venv", run_at="not a time", target={"kind": "HTTP", "url": sink})
    except InvalidRequest as exc:
        assert isinstance(exc, ProblemError) and exc.type == "/problems/invalid-request"
        print("ok", job.id, exc.type)
"""


def test_installed_into_a_fresh_venv_it_drives_the_api_alone(
    api: VakitProcess, sink: Sink, tmp_path: Path
) -> None:
    # uv's pip interface (the uv `make setup` installs), offline: the
    # package and its one dependency come from the checkout and uv's cache.
    source = tmp_path / "src"
    subprocess.run(["cp", "-r", str(REPO / "clients" / "python"), str(source)], check=True)
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAKIT_", "VIRTUAL_ENV", "PYTHONPATH"))}
    subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(venv)], check=True, env=env)
    installed = subprocess.run(
        [str(UV), "pip", "install", "--offline", "--python", str(venv / "bin" / "python"), str(source)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    names = {line.split()[1].split("=")[0] for line in installed.stderr.splitlines() if line.startswith(" + ")}
    assert {"vakit-client", "httpx"} <= names, installed.stderr
    assert not names & {"vakit", "fastapi", "pydantic", "psycopg", "aiohttp", "kazoo"}, names
    run = subprocess.run(
        [str(venv / "bin" / "python"), "-c", textwrap.dedent(SCRIPT), api.base_url + "/api/v1", TOKEN, sink.url],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok job_") and "/problems/invalid-request" in run.stdout


EXAMPLES = REPO / "clients" / "python" / "examples"


def test_the_documented_examples_run(api: VakitProcess, worker: VakitProcess, sink: Sink, tmp_path: Path) -> None:
    """docs/clients.md includes these files: each runs against the API as written."""
    port = find_free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAKIT_")}
    env.update(VAKIT_URL=api.base_url, VAKIT_TOKEN=TOKEN, VAKIT_SIGNING_SECRET=SECRET,
               ORDERS_URL=sink.url, REPORTS_URL=sink.url, PORT=str(port))  # fmt: skip

    def example(name: str) -> str:
        done = subprocess.run([sys.executable, str(EXAMPLES / name)], env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    job_id, status = example("create_and_cancel.py").split()
    assert job_id.startswith("job_") and status == "CANCELLED"
    # Run again: the key finds the same job, which is cancelled already.
    again = example("create_and_cancel.py").splitlines()
    assert again[0].startswith("not cancelled:") and again[1] == f"{job_id} CANCELLED"

    assert example("crons_as_code.py").split("\n")[:2] == ["create reports.settlement", "create reports.usage"]
    assert example("crons_as_code.py").split() == ["unchanged", "reports.settlement", "unchanged", "reports.usage"]

    with Client(api.base_url, TOKEN) as client:
        dead = client.create_job(type="order.cancel-unpaid", run_at=datetime.now(UTC),
                                 target={"kind": "HTTP", "url": sink.url}, payload={"status": 400})  # fmt: skip
        wait_for(lambda: client.get_job(dead.id).status == "FAILED", what="the job to fail")
        assert example("retry_dead_letters.py").startswith(f"retrying {dead.id} ")
        assert client.get_job(dead.id).attempt >= 1

        log = tmp_path / "receiver.out"
        with log.open("w") as out:
            receiver = subprocess.Popen([sys.executable, str(EXAMPLES / "receive_firing.py")], env=env,
                                        stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            wait_for(lambda: _accepts(port), what="the example receiver to listen")
            fired = client.create_job(type="sdk.receiver", run_at=datetime.now(UTC),
                                      target={"kind": "HTTP", "url": f"http://127.0.0.1:{port}/hook"},
                                      payload={"n": 7})  # fmt: skip
            wait_for(lambda: client.get_job(fired.id).status == "SUCCEEDED", what="the signed firing")
            assert f"{fired.id} 1 {{'n': 7}}" in log.read_text()
            unsigned = httpx.post(f"http://127.0.0.1:{port}/hook", content=b"{}",
                                  headers={"webhook-id": "x", "webhook-timestamp": "1", "webhook-signature": "v1,AAAA"})  # fmt: skip
            assert unsigned.status_code == 401
        finally:
            receiver.terminate()
            receiver.wait(timeout=10)


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
