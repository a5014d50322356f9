"""The HTTP target against a real HTTP server on loopback: what a receiver
gets, and how each answer maps to an outcome."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import shardmap
from cluster.model import ClaimedJob
from cluster.targets.http import HttpTarget
from cluster.targets.policy import AddressPolicy
from cluster.targets.scope import TargetScope
from cluster.targets.signing import Signer
from tests.helpers import claimed_job, webhook_signatures_valid

T0 = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
NEW = "whsec_" + base64.b64encode(b"new secret of the orders team!!!").decode()
OLD = "whsec_" + base64.b64encode(b"old secret of the orders team!!!").decode()
OTHER = "whsec_" + base64.b64encode(b"the billing team's secret, 32 B").decode()


class Receiver:
    """Answers POST /{status} with that status; /slow never answers in time."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.raw: list[bytes] = []  # the bodies as sent: what a signature covers
        self.base = ""
        self._runner: web.AppRunner | None = None
        self._released = asyncio.Event()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw)
        self.requests.append((request.path, dict(request.headers), body))
        self.raw.append(raw)
        name = request.match_info["name"]
        if name == "slow":
            await self._released.wait()  # until the test ends
            return web.Response(status=200)
        status = int(name)
        if 300 <= status < 400:
            raise web.HTTPFound("/200")
        return web.Response(status=status, text="" if status < 300 else f"nope {status}")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{name}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    yield r
    await r.stop()


@pytest.fixture
async def target() -> AsyncIterator[HttpTarget]:
    t = HttpTarget(AddressPolicy(allow_private=True))
    yield t
    await t.close()


def job(url: str, attempt: int = 2) -> ClaimedJob:
    return claimed_job(
        {"kind": "HTTP", "url": url, "headers": {"X-Team": "payments"}},
        attempt=attempt,
        type="order.cancel",
        payload_json='{"orderId": 98213, "big": 123456789012345678901234567890}',
        scheduled_for=T0,
    )


async def test_success_carries_what_a_receiver_deduplicates_on(
    receiver: Receiver, target: HttpTarget
) -> None:
    j = job(f"{receiver.base}/204")
    job_id = shardmap.encode_id("job", j.id)
    result = await target.fire(j, job_id, 5.0)
    assert result.ok and result.error is None
    [(path, headers, body)] = receiver.requests
    assert path == "/204"
    assert body == {
        "jobId": job_id,
        "type": "order.cancel",
        "scheduledFor": "2026-11-30T00:00:00Z",
        "attempt": 2,
        # Spliced in as stored: even a number beyond a 64-bit integer or a
        # double arrives exactly as the client sent it.
        "payload": {"orderId": 98213, "big": 123456789012345678901234567890},
    }
    assert headers["Vakit-Job-Id"] == job_id
    assert headers["Vakit-Attempt"] == "2"
    assert headers["Vakit-Scheduled-For"] == "2026-11-30T00:00:00Z"
    assert headers["Idempotency-Key"] == f"{job_id}:2026-11-30T00:00:00Z"
    assert headers["X-Team"] == "payments"  # the job's own headers go along


@pytest.mark.parametrize(
    ("status", "retryable", "error"),
    [
        (500, True, "HTTP 500: nope 500"),
        (503, True, "HTTP 503: nope 503"),
        (429, True, "HTTP 429: nope 429"),
        (408, True, "HTTP 408: nope 408"),
        (404, False, "HTTP 404: nope 404"),
        (400, False, "HTTP 400: nope 400"),
        (302, False, "HTTP 302"),
    ],
)
async def test_answers_map_to_outcomes(
    receiver: Receiver, target: HttpTarget, status: int, retryable: bool, error: str
) -> None:
    result = await target.fire(job(f"{receiver.base}/{status}"), "job_x", 5.0)
    assert not result.ok
    assert result.retryable is retryable
    assert result.error is not None and result.error.startswith(error)
    if status == 302:
        assert "redirects are not followed" in result.error
        assert [path for path, _, _ in receiver.requests] == ["/302"]  # not followed


async def test_timeout_is_retried(receiver: Receiver, target: HttpTarget) -> None:
    result = await target.fire(job(f"{receiver.base}/slow"), "job_x", 0.3)
    assert not result.ok and result.retryable
    assert result.error == "timed out after 0.3 s"


async def test_connection_refused_is_retried(target: HttpTarget) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = await target.fire(job(f"http://127.0.0.1:{port}/"), "job_x", 5.0)
    assert not result.ok and result.retryable
    assert "Connect" in (result.error or "")


async def test_refused_address_fails_for_good_without_a_request(receiver: Receiver) -> None:
    strict = HttpTarget(AddressPolicy(hosts=frozenset({"hooks.example.com"})))
    try:
        for _ in range(2):  # the second answer comes from the checked-URL cache
            result = await strict.fire(job(f"{receiver.base}/200"), "job_x", 5.0)
            assert not result.ok and not result.retryable
            assert "127.0.0.1" in (result.error or "")
    finally:
        await strict.close()
    assert receiver.requests == []


async def fire_as(target: HttpTarget, url: str, owner: str | None, **target_extra: Any) -> Any:
    j = claimed_job({"kind": "HTTP", "url": url, **target_extra}, owner=owner, scheduled_for=T0)
    try:
        return await target.fire(j, shardmap.encode_id("job", j.id), 5.0)
    finally:
        await target.close()


def verified(receiver: Receiver, index: int, secret: str) -> bool:
    """What a receiver does with a firing: verify it, as the docs show
    (docs/tenancy-and-security.md, *Signed firings*)."""
    _, headers, _ = receiver.requests[index]
    return webhook_signatures_valid(
        secret,
        headers["webhook-id"],
        headers["webhook-timestamp"],
        receiver.raw[index],
        headers["webhook-signature"],
    )


async def test_firings_are_signed_for_their_owner_and_rotation_sends_both(
    receiver: Receiver,
) -> None:
    before = int(time.time())
    rotating = HttpTarget(
        AddressPolicy(allow_private=True), signer=Signer({"orders": [NEW, OLD], "billing": [OTHER]})
    )
    assert (await fire_as(rotating, f"{receiver.base}/204", "orders")).ok
    _, headers, body = receiver.requests[0]
    assert headers["Vakit-Owner"] == "orders"
    assert headers["webhook-id"] == headers["Idempotency-Key"] == f"{body['jobId']}:2026-11-30T00:00:00Z"
    assert before <= int(headers["webhook-timestamp"]) <= time.time()
    assert len(headers["webhook-signature"].split()) == 2
    # Mid-rotation, a receiver that knows either secret accepts it; one
    # that knows another owner's secret does not.
    assert verified(receiver, 0, NEW) and verified(receiver, 0, OLD)
    assert not verified(receiver, 0, OTHER)

    # The rotation done: the old secret no longer verifies.
    rotated = HttpTarget(AddressPolicy(allow_private=True), signer=Signer({"orders": [NEW]}))
    assert (await fire_as(rotated, f"{receiver.base}/204", "orders")).ok
    assert len(receiver.requests[1][1]["webhook-signature"].split()) == 1
    assert verified(receiver, 1, NEW) and not verified(receiver, 1, OLD)

    # A tampered body fails the check.
    receiver.raw[1] = receiver.raw[1].replace(b'"attempt": 1', b'"attempt": 9')
    assert not verified(receiver, 1, NEW)

    # An owner the operator gave no secret: id and timestamp, no signature.
    assert (await fire_as(rotated, f"{receiver.base}/204", "unsigned")).ok
    third = receiver.requests[2][1]
    assert third["Vakit-Owner"] == "unsigned" and "webhook-timestamp" in third
    assert "webhook-signature" not in third


async def test_a_job_cannot_set_credentials_or_vakits_own_headers(receiver: Receiver) -> None:
    target = HttpTarget(AddressPolicy(allow_private=True), signer=Signer({"orders": [NEW]}))
    for headers in (
        {"Authorization": "Bearer stolen"},
        {"cookie": "session=1"},
        {"X-Forwarded-For": "10.0.0.1"},
        {"vakit-owner": "billing"},  # another owner's name, in another case
        {"Webhook-Signature": "v1,forged"},
    ):
        result = await fire_as(target, f"{receiver.base}/204", "orders", headers=headers)
        assert not result.ok and not result.retryable, headers
        assert "may not set" in (result.error or "") or "may not be set" in (result.error or "")
    assert receiver.requests == []
    # The operator may allow a header (here Authorization) by leaving it off the list.
    lenient = HttpTarget(
        AddressPolicy(allow_private=True), scope=TargetScope(header_deny=["Cookie"])
    )
    ok = await fire_as(lenient, f"{receiver.base}/204", "orders", headers={"Authorization": "Bearer own"})
    assert ok.ok and receiver.requests[0][1]["Authorization"] == "Bearer own"


async def test_firing_honours_the_owners_grants(receiver: Receiver) -> None:
    scope = TargetScope({"orders": ["127.0.0.1"], "billing": ["hooks.billing.example"]})
    policy = AddressPolicy(allow_private=True)
    refused = await fire_as(HttpTarget(policy, scope=scope), f"{receiver.base}/204", "billing")
    assert not refused.ok and not refused.retryable
    assert "not among the hosts granted to 'billing'" in (refused.error or "")
    assert receiver.requests == []
    assert (await fire_as(HttpTarget(policy, scope=scope), f"{receiver.base}/204", "orders")).ok
    strict = TargetScope({"orders": ["127.0.0.1"]}, require_grants=True)
    ungranted = await fire_as(HttpTarget(policy, scope=strict), f"{receiver.base}/204", "nobody")
    assert not ungranted.ok and "no HTTP hosts granted" in (ungranted.error or "")
    assert len(receiver.requests) == 1


def readme_verify() -> Any:
    """The receiver's check exactly as the docs show it (it moved there from
    the README): docs/tenancy-and-security.md, *Signed firings*."""
    readme = (Path(__file__).resolve().parents[2] / "docs" / "tenancy-and-security.md").read_text()
    [snippet] = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "def verify(" in b]
    scope: dict[str, Any] = {}
    exec(snippet, scope)
    return scope["verify"]


async def test_the_readme_receiver_verifies_a_real_firing(receiver: Receiver) -> None:
    verify = readme_verify()
    target = HttpTarget(AddressPolicy(allow_private=True), signer=Signer({"orders": [NEW, OLD]}))
    assert (await fire_as(target, f"{receiver.base}/204", "orders")).ok
    _, headers, _ = receiver.requests[0]
    body = receiver.raw[0]
    assert verify(NEW, headers, body) and verify(OLD, headers, body)
    assert not verify(OTHER, headers, body)
    assert not verify(NEW, headers, body + b" ")
    stale = {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) - 3600)}
    assert not verify(NEW, stale, body)
