"""The Python SDK (clients/python) without a cluster: its retries against a
scripted local server (the same Idempotency-Key on every attempt), its
firing check against the server's own signer, and its tables held to the
server's (problem types, cron defaults). The live-API tests are in
tests/integration/test_python_sdk.py."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import vakit_client
from vakit_client import (
    AsyncClient,
    Client,
    InvalidSignature,
    NotFound,
    ProblemError,
    RetryPolicy,
    ShardUnavailable,
    TooManyRequests,
    TransportError,
    verify_firing,
)
from vakit_client.crons_as_code import CRON_DEFAULTS, plan_changes
from vakit_client.models import Cron

from cluster.api.problems import KINDS
from cluster.services.cron_document import CreateCronIn
from cluster.targets.signing import Signer

FAST = RetryPolicy(max_retries=3, backoff=0.01, max_backoff=0.02)
PROBLEM_503 = {"type": "/problems/shard-unavailable", "title": "Shard unavailable",
               "status": 503, "detail": "shard 1 is unavailable", "shard": 1}  # fmt: skip
PROBLEM_429 = {"type": "/problems/too-many-requests", "title": "Too many requests",
               "status": 429, "detail": "slow down"}  # fmt: skip


@dataclass
class Scripted:
    """A local HTTP server that answers each request with the next scripted
    answer: ``(status, body, headers)``, or ``"drop"`` to close the
    connection without answering. It records every request it read."""

    answers: list[Any]
    seen: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def keys(self) -> list[str | None]:
        return [headers.get("idempotency-key") for _, _, headers, _ in self.seen]


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    script = Scripted([])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            headers = {k.lower(): v for k, v in self.headers.items()}
            script.seen.append((self.command, self.path, headers, body))
            answer = script.answers.pop(0)
            if answer == "drop":
                self.close_connection = True
                self.connection.close()
                return
            status, doc, extra = answer
            data = json.dumps(doc).encode()
            self.send_response(status)
            kind = "application/problem+json" if status >= 400 else "application/json"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_PATCH = _answer

        def log_message(self, *args: Any) -> None:
            return None

    script.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    script.server.daemon_threads = True
    thread = threading.Thread(target=script.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield script
    finally:
        script.server.shutdown()
        script.server.server_close()
        thread.join(timeout=5)


def _create(client: Client) -> vakit_client.CreatedJob:
    return client.create_job(
        type="sdk.test",
        run_at=datetime(2030, 1, 1, tzinfo=UTC),
        target={"kind": "HTTP", "url": "https://hooks.example.com/x"},
        payload={"n": 1},
    )


def test_a_create_refused_with_503_is_sent_again_with_the_same_key(scripted: Scripted) -> None:
    scripted.answers += [
        (503, PROBLEM_503, {"Retry-After": "0"}),
        "drop",  # the answer lost on the way: sent again, same key
        (201, {"jobId": "job_1", "status": "SCHEDULED"}, {}),
    ]
    with Client(scripted.url + "/api/v1", "tok", retry=FAST) as client:
        job = _create(client)
    assert (job.id, job.status, job.replayed) == ("job_1", "SCHEDULED", False)
    keys = scripted.keys()
    assert len(keys) == 3 and keys[0] and keys == [keys[0]] * 3 and job.idempotency_key == keys[0]
    method, path, headers, body = scripted.seen[0]
    assert (method, path, headers["authorization"]) == ("POST", "/api/v1/jobs", "Bearer tok")
    assert json.loads(body)["runAt"] == "2030-01-01T00:00:00+00:00"


def test_each_create_has_its_own_key_and_a_given_key_is_sent(scripted: Scripted) -> None:
    scripted.answers += [(201, {"jobId": f"job_{i}", "status": "SCHEDULED"}, {}) for i in range(2)]
    scripted.answers.append((200, {"jobId": "job_0", "status": "SCHEDULED"}, {}))
    with Client(scripted.url, "tok", retry=FAST) as client:
        _create(client), _create(client)
        again = client.create_job(
            type="t", run_at="2030-01-01T00:00:00Z", target={"kind": "NOOP"}, idempotency_key="k-1"
        )
    first, second, given = scripted.keys()
    assert first != second and given == "k-1" and again.replayed


def test_retries_end_with_the_typed_error(scripted: Scripted) -> None:
    scripted.answers += [(503, PROBLEM_503, {"Retry-After": "0"})] * 4
    with Client(scripted.url, "tok", retry=FAST) as client, pytest.raises(ShardUnavailable) as raised:
        _create(client)
    assert len(scripted.seen) == 4  # the first send and max_retries more
    err = raised.value
    assert (err.type, err.status, err.detail, err.body["shard"]) == (
        "/problems/shard-unavailable", 503, "shard 1 is unavailable", 1,
    )  # fmt: skip


def test_an_action_is_not_sent_twice_after_a_503_but_is_after_a_429(scripted: Scripted) -> None:
    # A trigger answered 503 may have created its occurrence: not sent again.
    scripted.answers += [(503, PROBLEM_503, {"Retry-After": "0"})]
    with Client(scripted.url, "tok", retry=FAST) as client:
        with pytest.raises(ShardUnavailable):
            client.trigger_cron("cron_1")
        assert len(scripted.seen) == 1
        # A 429 is the limiter's, before any work: sent again.
        scripted.answers += [
            (429, PROBLEM_429, {"Retry-After": "0"}),
            (201, {"jobId": "job_9", "scheduledFor": "2030-01-01T00:00:00Z"}, {}),
        ]
        assert client.trigger_cron("cron_1").job_id == "job_9"
        # A Retry-After longer than the policy allows is the caller's to decide.
        scripted.answers += [(429, PROBLEM_429, {"Retry-After": "3600"})]
        with pytest.raises(TooManyRequests) as raised:
            client.trigger_cron("cron_1")
        assert raised.value.retry_after == 3600
    assert len(scripted.seen) == 4


def test_no_answer_at_all_is_a_transport_error() -> None:
    with Client("http://127.0.0.1:1", "tok", retry=FAST) as client:
        started = time.monotonic()
        with pytest.raises(TransportError):
            client.get_job("job_1")
    assert time.monotonic() - started < 5


def test_search_follows_the_cursor_to_the_last_page(scripted: Scripted) -> None:
    def job(n: int) -> dict[str, Any]:
        return {"jobId": f"job_{n}", "type": "t", "status": "SUCCEEDED",
                "runAt": "2030-01-01T00:00:00Z", "scheduledFor": "2030-01-01T00:00:00Z",
                "attempt": 1, "maxAttempts": 5, "timeoutSeconds": 60, "shard": 0,
                "target": {"kind": "NOOP"}, "payload": None, "lastError": None}  # fmt: skip

    scripted.answers += [
        (200, {"items": [job(1), job(2)], "nextCursor": "job_2", "missingShards": []}, {}),
        (200, {"items": [job(3)], "nextCursor": None, "missingShards": []}, {}),
    ]
    with Client(scripted.url, "tok", retry=FAST) as client:
        ids = [j.id for j in client.search_jobs(status=["SUCCEEDED", "FAILED"], page_size=2)]
    assert ids == ["job_1", "job_2", "job_3"]
    assert scripted.seen[0][1] == "/api/v1/jobs?limit=2&status=SUCCEEDED&status=FAILED"
    assert scripted.seen[1][1].endswith("&cursor=job_2")


async def test_the_async_client_retries_with_the_same_key(scripted: Scripted) -> None:
    not_found = {"type": "/problems/not-found", "title": "Not found", "status": 404,
                 "detail": "no job job_2"}  # fmt: skip
    scripted.answers += [
        (503, PROBLEM_503, {"Retry-After": "0"}),
        (201, {"jobId": "job_1", "status": "SCHEDULED"}, {}),
        (404, not_found, {}),
    ]
    async with AsyncClient(scripted.url, "tok", retry=FAST) as client:
        job = await client.create_job(
            type="t", run_at=datetime(2030, 1, 1, tzinfo=UTC), target={"kind": "NOOP"}
        )
        with pytest.raises(NotFound):
            await client.get_job("job_2")
    first, second, _ = scripted.keys()
    assert job.id == "job_1" and first and first == second


def test_a_naive_datetime_is_refused_before_sending(scripted: Scripted) -> None:
    with Client(scripted.url, "tok") as client, pytest.raises(ValueError, match="aware"):
        client.create_job(type="t", run_at=datetime(2030, 1, 1), target={"kind": "NOOP"})
    assert scripted.seen == []


def test_every_problem_type_of_the_server_has_its_exception() -> None:
    for slug, kind in KINDS.items():
        cls = vakit_client.PROBLEM_TYPES[kind.type]
        assert cls.slug == slug and issubclass(cls, ProblemError)
        err = vakit_client.errors.problem_error(kind.status, {"type": kind.type, "status": kind.status, "detail": "d"})
        assert type(err) is cls and err.type == kind.type
    assert len(vakit_client.PROBLEM_TYPES) == len(KINDS)
    # Not a problem document (a proxy's page): the base class, with the text.
    err = vakit_client.errors.problem_error(502, b"<html>Bad gateway</html>")
    assert type(err) is ProblemError and err.status == 502 and "Bad gateway" in err.detail


def test_the_cron_defaults_are_the_servers() -> None:
    fields = CreateCronIn.model_fields
    assert {k: fields[k].default for k in CRON_DEFAULTS} == CRON_DEFAULTS


def test_a_firing_signed_by_the_server_verifies() -> None:
    secret, old = "whsec_" + "c2VjcmV0LWtleS1ieXRlcy0xMjM0NTY=", "plain-text-secret-16b"
    body = b'{"jobId": "job_1", "type": "t", "scheduledFor": "2030-01-01T00:00:00Z", "attempt": 2, "payload": {"a": 1}}'
    headers = dict(Signer({"svc": [secret, old]}).headers("svc", "job_1:2030-01-01T00:00:00Z", body))
    firing = verify_firing(body, headers, secret)
    assert (firing.job_id, firing.attempt, firing.payload) == ("job_1", 2, {"a": 1})
    assert firing.idempotency_key == "job_1:2030-01-01T00:00:00Z" and firing.run_at is None
    # A run a calendar moved: the actual time beside the nominal one.
    moved = body.replace(b'"attempt"', b'"runAt": "2030-01-02T00:00:00Z", "attempt"')
    moved_headers = dict(Signer({"svc": [secret]}).headers("svc", "job_1:2030-01-01T00:00:00Z", moved))
    firing = verify_firing(moved, moved_headers, secret)
    assert firing.scheduled_for == datetime(2030, 1, 1, tzinfo=UTC)
    assert firing.run_at == datetime(2030, 1, 2, tzinfo=UTC)
    # Either secret of a rotation verifies; header names in any case.
    verify_firing(body, {k.title(): v for k, v in headers.items()}, ["unrelated-secret-123456", old])
    with pytest.raises(InvalidSignature, match="verifies"):
        verify_firing(body.replace(b'"a": 1', b'"a": 2'), headers, secret)
    with pytest.raises(InvalidSignature, match="verifies"):
        verify_firing(body, headers, "another-secret-1234567")
    with pytest.raises(InvalidSignature, match="from now"):
        verify_firing(body, headers, secret, now=time.time() + 3600)
    with pytest.raises(InvalidSignature, match="webhook-signature"):
        verify_firing(body, {k: v for k, v in headers.items() if k != "webhook-signature"}, secret)


def test_apply_plans_creates_updates_unchanged_and_prunes() -> None:
    def server_cron(name: str, **doc: Any) -> Cron:
        base = {"cronJobId": f"cron_{name}", "name": name, "schedule": "0 * * * *",
                "timeZone": "UTC", "type": name, "target": {"kind": "HTTP", "url": "https://h/x", "method": "POST"},
                "enabled": True, **{k: v for k, v in CRON_DEFAULTS.items() if k != "enabled"}}  # fmt: skip
        return Cron.from_json({**base, **doc})

    target = {"kind": "HTTP", "url": "https://h/x"}
    server = [server_cron("ops.same"), server_cron("ops.changed", maxAttempts=7),
              server_cron("ops.gone"), server_cron("other.kept")]  # fmt: skip
    wanted: list[dict[str, Any]] = [
        {"name": "ops.same", "schedule": "0 * * * *", "time_zone": "UTC", "target": target},
        {"name": "ops.changed", "schedule": "5 * * * *", "time_zone": "UTC", "target": target},
        {"name": "ops.new", "schedule": "0 2 * * *", "time_zone": "UTC", "target": target,
         "start_at": datetime(2030, 1, 1, tzinfo=UTC)},
    ]  # fmt: skip
    changes = plan_changes(wanted, server, "ops.", prune=True)
    assert [(c.action, c.name) for c in changes] == [
        ("unchanged", "ops.same"), ("update", "ops.changed"), ("create", "ops.new"),
        ("delete", "ops.gone"),
    ]  # fmt: skip
    # The field left out goes back to its default; the one given is set.
    assert changes[1].fields == {"schedule": "5 * * * *", "maxAttempts": 3}
    assert changes[2].fields["startAt"] == "2030-01-01T00:00:00+00:00"
    with pytest.raises(ValueError, match="prefix"):
        plan_changes([{**wanted[0], "name": "x.y"}], server, "ops.", prune=False)


def test_the_sync_client_is_the_async_one_without_asyncio() -> None:
    # client.py is written from async_client.py (an operation is written
    # once); an edit to either alone fails here.
    tool = Path(__file__).resolve().parents[2] / "clients" / "python" / "tools" / "async_to_sync.py"
    spec = importlib.util.spec_from_file_location("async_to_sync", tool)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = (module.HERE / "async_client.py").read_text()
    assert module.sync_source(source) == (module.HERE / "client.py").read_text(), (
        "clients/python/vakit_client/client.py is stale: run clients/python/tools/async_to_sync.py"
    )
    public = [name.replace("aclose", "close") for name in vars(AsyncClient) if not name.startswith("_")]
    assert public == [name for name in vars(Client) if not name.startswith("_")]
