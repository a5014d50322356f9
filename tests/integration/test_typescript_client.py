"""The TypeScript client (clients/typescript): its committed types are what
openapi-typescript makes of a live API's /openapi.json, and its Node test
(openapi-fetch calls, type-checked by tsc) passes against that API.

`make setup` installs its node_modules from the committed package-lock.json
(npm ci); `make ts-client` regenerates the types."""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster.local.childproc import find_free_port
from cluster.local.pgserver import PgServer
from cluster.targets.signing import Signer
from tests.helpers import wait_for
from tests.procs import REPO, VakitProcess, processes_on_fresh_shards

pytestmark = pytest.mark.integration

TS = REPO / "clients" / "typescript"
TOKEN, OWNER = "ts-token", "ts-team"
SECRET = "whsec_dHMtdGVzdC1zaWduaW5nLXNlY3JldC0zMmI="
# The options of `npm run generate` (package.json), which make ts-client runs.
GENERATE = ["--default-non-nullable", "false"]


@pytest.fixture(scope="module")
def api(pg_servers: list[PgServer], tmp_path_factory: pytest.TempPathFactory) -> Iterator[VakitProcess]:
    log_dir = tmp_path_factory.mktemp("ts-logs")
    with processes_on_fresh_shards(pg_servers, log_dir, api_tokens=f"{TOKEN}={OWNER}") as procs:
        yield procs.api().wait_ready()


def _node_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("VAKIT_")}


def test_the_committed_types_are_generated_from_the_live_document(api: VakitProcess, tmp_path: Path) -> None:
    document = tmp_path / "openapi.json"
    with urllib.request.urlopen(api.base_url + "/openapi.json", timeout=10) as resp:
        document.write_bytes(resp.read())
    generated = tmp_path / "schema.d.ts"
    done = subprocess.run(
        [str(TS / "node_modules" / ".bin" / "openapi-typescript"), str(document), *GENERATE, "-o", str(generated)],
        capture_output=True, text=True, timeout=120, env=_node_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    committed = (TS / "src" / "schema.d.ts").read_text()
    assert generated.read_text() == committed, (
        "clients/typescript/src/schema.d.ts differs from the API's /openapi.json: run `make ts-client` and commit it"
    )


def test_the_node_client_against_a_live_api(api: VakitProcess, tmp_path: Path) -> None:
    # Built into a copy: the checkout's dist/ is left alone (and tsc's type
    # check of src/ against the generated types is part of the build).
    work = tmp_path / "ts"
    shutil.copytree(TS, work, ignore=shutil.ignore_patterns("node_modules", "dist"), symlinks=True)
    (work / "node_modules").symlink_to(TS / "node_modules")
    env = _node_env() | {"VAKIT_URL": api.base_url, "VAKIT_TOKEN": TOKEN,
                         "TARGET_URL": "http://127.0.0.1:9/hook"}  # fmt: skip
    for command in (["npm", "run", "-s", "build"], ["node", "--test", "test/"]):
        done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, f"{command}: {done.stdout}\n{done.stderr}"
    assert "# pass 4" in done.stdout and "# fail 0" in done.stdout, done.stdout

    # The documented example (docs/clients.md includes it), run twice: the
    # key finds the same job the second time, cancelled already.
    def example() -> list[str]:
        done = subprocess.run(["node", "examples/create_and_cancel.mjs"], cwd=work, capture_output=True,
                              text=True, timeout=60, env=env | {"ORDERS_URL": "http://127.0.0.1:9/orders"})  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.splitlines()

    [first] = example()
    job_id, status = first.split()
    assert job_id.startswith("job_") and status == "CANCELLED"
    again = example()
    assert again[0].startswith("not cancelled:") and again[1] == f"{job_id} CANCELLED"

    # The receiver example checks a firing signed as the worker signs one.
    port = find_free_port()
    log = tmp_path / "receiver.out"
    with log.open("w") as out:
        receiver = subprocess.Popen(["node", "examples/receive_firing.mjs"], cwd=work, stdout=out,
                                    stderr=subprocess.STDOUT, env=env | {"PORT": str(port), "VAKIT_SIGNING_SECRET": SECRET})  # fmt: skip
    try:
        body = b'{"jobId": "job_x", "type": "t", "scheduledFor": "2030-01-01T00:00:00Z", "attempt": 3, "payload": {"n": 7}}'
        headers = dict(Signer({OWNER: [SECRET]}).headers(OWNER, "job_x:2030-01-01T00:00:00Z", body))
        url = f"http://127.0.0.1:{port}/hook"
        wait_for(lambda: _answers(url), what="the example receiver to listen")
        assert httpx.post(url, content=body, headers=headers).status_code == 200
        assert httpx.post(url, content=body.replace(b"7", b"8"), headers=headers).status_code == 401
        assert httpx.post(url, content=body, headers={**headers, "webhook-timestamp": "1"}).status_code == 401
        assert log.read_text().splitlines() == ['job_x 3 {"n":7}']
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.TransportError:
        return False
    return True
