"""A target kind added from outside the package is one module and its
registration (tests/unit/echo_kind.py): the API validates and checks its
spec, lists its model in OpenAPI, and the worker builds its target, with no
edit to cluster/.

The kind registers in a child process: this one has built its target
documents already (the API is imported by other tests), and a kind
registered after that is refused, which the last test shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest

from cluster.services.documents import TargetIn
from cluster.targets import Target
from cluster.targets.document import TargetDocument
from cluster.targets.kinds import KINDS
from cluster.targets.registry import TargetEnv, TargetKind

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def echo() -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "tests.unit.echo_kind"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    answers: dict[str, Any] = json.loads(run.stdout)
    return answers


def test_the_api_creates_a_job_and_a_cron_of_the_new_kind(echo: dict[str, Any]) -> None:
    assert echo["created"] == 201
    assert echo["stored_target"] == {"kind": "ECHO", "channel": "svc-a.audit"}
    assert echo["cron"] == 201


def test_the_new_kinds_model_and_check_refuse_as_the_built_in_ones_do(
    echo: dict[str, Any],
) -> None:
    status, problem = echo["unknown_field"]
    assert status == 422 and problem["type"] == "/problems/invalid-request"
    assert problem["errors"] == [
        {"field": "target.ECHO.url", "message": "Extra inputs are not permitted"}
    ]
    status, problem = echo["refused"]
    assert status == 422 and problem["field"] == "target.channel"
    assert problem["detail"] == "channel must start with 'svc-a.'"


def test_openapi_lists_the_new_kind_after_the_built_in_ones(echo: dict[str, Any]) -> None:
    assert echo["openapi_union"] == [
        f"#/components/schemas/{name}TargetIn" for name in ("Http", "Kafka", "Noop", "Echo")
    ]


def test_the_worker_builds_the_new_kinds_target(echo: dict[str, Any]) -> None:
    # HTTP is always offered; KAFKA and NOOP are not configured here.
    assert echo["worker_targets"] == {"HTTP": "HttpTarget", "ECHO": "EchoTarget"}


def test_a_kind_registered_after_the_documents_were_built_is_refused() -> None:
    assert TargetIn is not None  # the union is built: the registry is closed

    class LateTargetIn(TargetDocument):
        kind: Literal["LATE"]

    def build(env: TargetEnv) -> Target:
        raise AssertionError("never built")

    late = TargetKind(name="LATE", build=build, document=lambda: LateTargetIn)
    with pytest.raises(RuntimeError, match="'LATE' is registered after the target documents"):
        KINDS.register(late)
    assert KINDS.names() == ("HTTP", "KAFKA", "NOOP")
