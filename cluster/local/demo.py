"""The ``make run`` demo: a local HTTP target, a few jobs, and their firings.

It shows what a service sees: each firing carries ``jobId``, ``scheduledFor``
and ``attempt``; an idempotent repeat returns the first job; a target that
fails once is retried with backoff.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from cluster.instants import format_instant

__all__ = ["run_demo"]


class _Sink(BaseHTTPRequestHandler):
    # Shared by every request handler: http.server makes one instance per request.
    seen: ClassVar[dict[str, int]] = {}

    def do_POST(self) -> None:  # the name http.server dispatches POST to
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        first_time = self.seen.setdefault(body["jobId"], 0) == 0
        self.seen[body["jobId"]] += 1
        flaky = isinstance(body.get("payload"), dict) and body["payload"].get("flaky")
        status = 503 if flaky and first_time else 200
        now = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]
        print(
            f"  [{now}] target got {body['type']:<18} jobId={body['jobId']} "
            f"scheduledFor={body['scheduledFor']} attempt={body['attempt']} -> {status}",
            flush=True,
        )
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


def _call(
    api: str, token: str, method: str, path: str, body: Any = None, key: str | None = None
) -> tuple[int, Any]:
    req = urllib.request.Request(api + path, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Idempotency-Key", key)
    try:
        with urllib.request.urlopen(req, data, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def run_demo(api: str, token: str, stop: threading.Event) -> None:
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{sink.server_address[1]}/fire"
    now = datetime.now(UTC)
    print(f"demo: a target listens on {url}; creating jobs\n", flush=True)
    ids = []
    for i, (kind, delay, payload) in enumerate(
        [
            ("ORDER_AUTO_CANCEL", 2, {"orderId": 98213}),
            ("REMINDER", 4, {"userId": 7}),
            ("FLAKY_EXAMPLE", 5, {"flaky": True}),
            ("REPORT", 7, {"day": now.date().isoformat()}),
        ]
    ):
        run_at = format_instant(now + timedelta(seconds=delay))
        body = {
            "type": kind,
            "runAt": run_at,
            "target": {"kind": "HTTP", "url": url},
            "payload": payload,
            "maxAttempts": 3,
            "timeoutSeconds": 10,
        }
        status, out = _call(api, token, "POST", "/api/v1/jobs", body, key=f"demo-{now:%H%M%S}-{i}")
        print(f"  POST /jobs {kind:<18} runAt=+{delay}s -> {status} {out}", flush=True)
        ids.append(out["jobId"])
        if i == 0:
            status, again = _call(
                api, token, "POST", "/api/v1/jobs", body, key=f"demo-{now:%H%M%S}-{i}"
            )
            print(
                f"  POST /jobs again, same Idempotency-Key -> {status} {again} (no new job)",
                flush=True,
            )
    cron = {
        "name": f"demo-every-minute-{now:%H%M%S}",
        "schedule": "* * * * *",
        "timeZone": "Europe/Istanbul",
        "target": {"kind": "HTTP", "url": url},
        "payload": {"report": "heartbeat"},
        "misfirePolicy": "SKIP",
        "concurrency": "FORBID",
    }
    status, out = _call(api, token, "POST", "/api/v1/cron-jobs", cron)
    print(
        f"  POST /cron-jobs '* * * * *' Europe/Istanbul -> {status} cronJobId={out.get('cronJobId')} "
        f"nextFireAt={out.get('nextFireAt')} (it fires every minute while the cluster runs)",
        flush=True,
    )
    print("\nwaiting for the firings…\n", flush=True)
    deadline = datetime.now(UTC) + timedelta(seconds=45)
    states: dict[str, str] = {}
    while datetime.now(UTC) < deadline and not stop.is_set():
        states = {jid: _call(api, token, "GET", f"/api/v1/jobs/{jid}")[1]["status"] for jid in ids}
        if all(s in ("SUCCEEDED", "FAILED") for s in states.values()):
            break
        stop.wait(1.0)
    print("\nfinal states:", flush=True)
    for jid in ids:
        _, job = _call(api, token, "GET", f"/api/v1/jobs/{jid}")
        print(
            f"  {jid}  {job['type']:<18} shard={job['shard']} status={job['status']} "
            f"attempts={len(job['attempts'])}",
            flush=True,
        )
    print("\ndemo done; the cluster keeps running.", flush=True)
