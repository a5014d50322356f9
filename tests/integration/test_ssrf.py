"""SSRF: hostile target URLs never reach a listener on this machine.

A real TCP listener on every local address (``::`` dual stack, so 127.x,
0.0.0.0, ::1 and the machine's own addresses all land on it) counts the
connections it accepts. Each URL of the corpus is sent through the API (with
the in-memory stores: the create-time check) and fired by a real
:class:`HttpTarget` (the connect-time check); the listener must accept
nothing. The names of ``NAMES`` resolve to loopback offline (``/etc/hosts``):
the operator allowed them *by name*, so they pass the create-time check, and
only the check of the address actually connected to stops them.

A control URL, with loopback granted as a CIDR, does reach the listener: the
corpus passes because of the policy, not because nothing could connect. The
last test runs the names through the API and a worker on real shards: the
jobs end FAILED at their first attempt, with the reason, and nothing arrives.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from cluster.api.app import create_app
from cluster.config import Settings
from cluster.coordination.base import StaticCoordinator
from cluster.processes import build_targets
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore
from cluster.store.postgres import PgStore
from cluster.targets.http import HttpTarget
from cluster.targets.httpclient import HttpClient
from cluster.targets.policy import AddressPolicy, AddressRefused
from cluster.worker.worker import Worker
from tests.helpers import claimed_job, eventually
from tests.integration.test_api import client_for
from tests.openapi_conformance import conformance_hooks

HOSTNAME = socket.gethostname()

# Written with ``{p}`` for the listener's port. Every one of them names this
# machine (or a private, metadata or translated address standing for it).
LITERALS = [
    # Unicode dots and digits (ideographic, fullwidth and halfwidth full
    # stops; fullwidth digits; circled letters): IDNA folds them into
    # 127.0.0.1, 169.254.169.254 and localhost.
    "http://127\u30020\u30020\u30021:{p}/",
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:{p}/",
    "http://127\uff0e0\uff0e0\uff0e1:{p}/",
    "http://127\uff610\uff610\uff611:{p}/",
    "http://\uff11\uff12\uff17\u3002\uff10\u3002\uff10\u3002\uff11:{p}/",
    "http://169\u3002254\u3002169\u3002254:{p}/latest/meta-data/",
    "http://\u24db\u24de\u24d2\u24d0\u24db\u24d7\u24de\u24e2\u24e3:{p}/",
    "http://127%2e0%2e0%2e1:{p}/",
    # Old IPv4 spellings: inet_aton reads them as 127.0.0.1 or 0.0.0.0.
    "http://2130706433:{p}/",
    "http://127.1:{p}/",
    "http://127.0.1:{p}/",
    "http://0177.0.0.1:{p}/",
    "http://0x7f.0.0.1:{p}/",
    "http://0x7f000001:{p}/",
    "http://017700000001:{p}/",
    "http://0x7f.1:{p}/",
    "http://127.000.000.001:{p}/",
    "http://0:{p}/",
    "http://0.0.0.0:{p}/",
    "http://127.0.0.1.:{p}/",
    # Canonical loopback, private, shared and special IPv4.
    "http://127.0.0.1:{p}/",
    "http://127.0.0.2:{p}/",
    "http://127.255.255.254:{p}/",
    "http://user:pw@127.0.0.1:{p}/",
    "http://10.0.0.1:{p}/",
    "http://172.16.0.1:{p}/",
    "http://192.168.1.1:{p}/",
    "http://100.64.0.1:{p}/",
    "http://100.127.255.254:{p}/",
    "http://169.254.169.254:{p}/",
    "http://100.100.100.200:{p}/",
    "http://198.18.0.1:{p}/",
    "http://192.0.0.8:{p}/",
    "http://224.0.0.1:{p}/",
    "http://255.255.255.255:{p}/",
    # IPv6: loopback, unspecified, link-local, ULA, and IPv4 wrapped in IPv6.
    "http://[::1]:{p}/",
    "http://[0:0:0:0:0:0:0:1]:{p}/",
    "http://[::]:{p}/",
    "http://[::ffff:127.0.0.1]:{p}/",
    "http://[::ffff:7f00:1]:{p}/",
    "http://[::ffff:169.254.169.254]:{p}/",
    "http://[::127.0.0.1]:{p}/",
    "http://[64:ff9b::127.0.0.1]:{p}/",
    "http://[64:ff9b::a00:1]:{p}/",
    "http://[64:ff9b:1::7f00:1]:{p}/",
    "http://[2002:7f00:1::]:{p}/",
    "http://[2002:a9fe:a9fe::]:{p}/",
    "http://[fe80::1]:{p}/",
    "http://[fd00::1]:{p}/",
    "http://[fd00:ec2::254]:{p}/",
    "http://[ff02::1]:{p}/",
    "http://[::ffff:0:7f00:1]:{p}/",
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:{p}/",
]
# Names that resolve to loopback without any DNS server (/etc/hosts).
NAMES = [
    "http://localhost:{p}/",
    "http://LOCALHOST:{p}/",
    "http://" + HOSTNAME + ":{p}/",
]
# The operator allows these names; none of their addresses.
ALLOWED_NAMES = ["localhost", HOSTNAME.lower()]


class Listener:
    """Accepts TCP connections on every local address, in a thread, and
    remembers who connected."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self.sock.bind(("::", 0))
        self.sock.listen(64)
        self.port: int = self.sock.getsockname()[1]
        self.peers: list[Any] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return  # closed
            self.peers.append(peer)
            conn.close()

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(5)


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


def settings(allow: list[str]) -> Settings:
    return Settings(
        shards=["mem-0"],
        api_tokens={"token-a": "svc-a"},
        http_target_allow=allow,
        allow_private_targets=False,
    )


async def serve(allow: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    store = MemStore(1)
    app = create_app(settings(allow), store=store, crons=MemCronStore(store))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api", event_hooks=conformance_hooks(app.openapi)
        ) as client:
            yield client


@pytest.fixture
async def api() -> AsyncIterator[httpx.AsyncClient]:
    """The default deployment: any public host, nothing private."""
    async for client in serve([]):
        yield client


@pytest.fixture
async def api_names() -> AsyncIterator[httpx.AsyncClient]:
    """An operator who allowed the loopback names by name."""
    async for client in serve(ALLOWED_NAMES):
        yield client


async def create(api: httpx.AsyncClient, url: str) -> httpx.Response:
    run_at = (datetime.now(UTC) + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    return await api.post(
        "/api/v1/jobs",
        headers={"Authorization": "Bearer token-a"},
        json={"type": "ssrf", "runAt": run_at, "target": {"kind": "HTTP", "url": url}},
    )


async def fire(url: str, policy: AddressPolicy) -> tuple[bool, bool, str | None]:
    target = HttpTarget(policy)
    try:
        result = await target.fire(claimed_job({"kind": "HTTP", "url": url}), "job_x", 1.5)
    finally:
        await target.close()
    return result.ok, result.retryable, result.error


def test_corpus_is_large_enough() -> None:
    assert len(LITERALS) + len(NAMES) >= 40
    assert len(set(LITERALS + NAMES)) == len(LITERALS + NAMES)


@pytest.mark.parametrize("template", LITERALS)
async def test_literal_is_refused_at_create(api: httpx.AsyncClient, template: str) -> None:
    r = await create(api, template.format(p=8080))
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "target.url"


@pytest.mark.parametrize("template", NAMES)
async def test_allowed_name_passes_create(api_names: httpx.AsyncClient, template: str) -> None:
    # The point of NAMES: these reach the worker, and only the connect-time
    # check stands between them and loopback.
    r = await create(api_names, template.format(p=8080))
    assert r.status_code == 201, r.text


@pytest.mark.parametrize(
    ("template", "allow"), [(t, []) for t in LITERALS] + [(t, ALLOWED_NAMES) for t in NAMES]
)
async def test_firing_never_reaches_the_listener(
    listener: Listener, template: str, allow: list[str]
) -> None:
    before = len(listener.peers)
    policy = AddressPolicy.from_list(allow, allow_private=False)
    ok, retryable, error = await fire(template.format(p=listener.port), policy)
    assert not ok and not retryable, error  # refused for good, not a network failure
    assert error
    assert len(listener.peers) == before, f"{template} reached the listener from {listener.peers[before:]}"


async def test_control_granted_loopback_reaches_the_listener(listener: Listener) -> None:
    # Granted by network, the same listener is reached: the refusals above
    # are the policy's.
    before = len(listener.peers)
    policy = AddressPolicy.from_list(["127.0.0.0/8"], allow_private=False)
    ok, retryable, error = await fire(f"http://127.0.0.1:{listener.port}/", policy)
    assert not ok and retryable and error  # the listener hangs up without answering
    assert len(listener.peers) == before + 1


@pytest.mark.parametrize("host", ["localhost", HOSTNAME, "127.0.0.1", "::1"])
async def test_the_client_alone_refuses_loopback(listener: Listener, host: str) -> None:
    # The client with no parse beforehand: the check of the address a
    # socket is for is enough on its own, literals included.
    policy = AddressPolicy.from_list([], allow_private=False)
    before = len(listener.peers)
    client = HttpClient(policy)
    try:
        with pytest.raises(AddressRefused) as caught:
            await client.post(("http", host, listener.port), b"POST / HTTP/1.1\r\n\r\n", 2.0)
    finally:
        await client.close()
    assert "refused" in str(caught.value)
    assert len(listener.peers) == before


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/cancel",
        "https://xn--mnchen-3ya.de/hook",
        "http://1example.com:8080/a?b=c",
        "http://8.8.8.8/",
        "http://[2606:4700:4700::1111]/",
        "http://[64:ff9b::808:808]/",  # NAT64 of a public address
        "http://[2002:808:808::]/",  # 6to4 of a public address
        "http://example.com./",
    ],
)
def test_public_targets_stay_allowed(url: str) -> None:
    AddressPolicy.from_list([], allow_private=False).check_url(url)


async def test_a_name_that_slips_through_create_fails_at_fire_and_nothing_arrives(
    listener: Listener, shard_dsns: list[str], store: PgStore
) -> None:
    # The whole path on real shards: the API accepts the operator-allowed
    # names, a worker built as `vakit worker` builds it claims and fires
    # them, and each job ends FAILED at its first attempt (a refusal is not
    # retried) with the reason, while the listener hears nothing.
    settings = Settings(
        shards=shard_dsns,
        api_tokens={"token-a": "svc-a"},
        http_target_allow=ALLOWED_NAMES,
        allow_private_targets=False,
        lease_seconds=2,
        lease_grace_seconds=1,
        poll_interval=0.1,
        complete_linger=0,
    )
    before = len(listener.peers)
    auth = {"Authorization": "Bearer token-a"}
    async for client in client_for(settings):
        ids = []
        for name in ("localhost", HOSTNAME):
            body = {
                "type": "ssrf",
                "runAt": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                "target": {"kind": "HTTP", "url": f"http://{name}:{listener.port}/"},
                "maxAttempts": 3,
            }
            r = await client.post("/api/v1/jobs", json=body, headers=auth)
            assert r.status_code == 201, r.text
            ids.append(r.json()["jobId"])
        worker = Worker(
            settings, store, StaticCoordinator("w-ssrf", len(shard_dsns)), build_targets(settings),
            worker_id="w-ssrf",
        )  # fmt: skip
        worker.start()

        async def finished(client: httpx.AsyncClient = client, ids: list[str] = ids) -> bool:
            jobs = [(await client.get(f"/api/v1/jobs/{i}", headers=auth)).json() for i in ids]
            return all(j["status"] == "FAILED" for j in jobs)

        try:
            await eventually(finished, 30, 0.1, "the jobs to fail")
        finally:
            await worker.stop(grace=1)
            for target in worker.targets.values():
                await target.close()
        for job_id in ids:
            job = (await client.get(f"/api/v1/jobs/{job_id}", headers=auth)).json()
            assert job["attempt"] == 1
            assert "refused addresses" in job["lastError"] and "not a public address" in job["lastError"]
    assert listener.peers[before:] == []
