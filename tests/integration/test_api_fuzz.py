"""Fuzz a running ``vakit api`` process on real PostgreSQL shards from its own
OpenAPI document (schemathesis): no input may get a 5xx, and every answer
must be what the document says (status, media type, body schema, headers).

Two passes, each bounded (a fixed number of examples, derandomized, no
shrinking): every operation with data that fits the document and with data
that does not; then sequences that follow the document's links (a created
job or cron's id fed to what reads, changes, triggers or deletes it).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from cluster.local.pgserver import PgServer
from tests.pgfixtures import clone_databases, drop_databases
from tests.procs import VakitProcess, running_processes

pytestmark = pytest.mark.integration

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
# /readyz answers 503 while no worker polls the shards (none runs here): its
# documented answer, not a server error; the document still has to say so.
READINESS_CHECKS = [c for c in CHECKS if c is not not_a_server_error]
# Bounded and repeatable: the same examples every run, none saved between
# runs, no shrinking (a failure prints the request that caused it).
BOUNDED = settings(
    max_examples=10,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def api(pg_servers: list[PgServer], tmp_path_factory: pytest.TempPathFactory) -> Iterator[VakitProcess]:
    dsns = clone_databases(pg_servers)
    log_dir: Path = tmp_path_factory.mktemp("fuzz")
    try:
        with running_processes(dsns, log_dir) as harness:
            proc = harness.api(
                api_tokens=f"{TOKEN}=svc-fuzz",
                operator_tokens=None,
                http_target_allow="hooks.example.com",
                allow_private_targets=False,
                enable_noop_target=True,
                max_payload_bytes=4096,
            ).wait_ready()
            yield proc
            assert proc.alive(), proc.log_tail()
            errors = [line for line in proc.log_text().splitlines() if '"level": "error"' in line]
            assert not errors, "\n".join(errors[:5])
    finally:
        drop_databases(dsns)


def load_schema(api: VakitProcess) -> Any:
    with urllib.request.urlopen(api.base_url + "/openapi.json", timeout=5) as resp:
        spec = json.loads(resp.read())
    schema = schemathesis.openapi.from_dict(spec)
    schema.config.base_url = api.base_url
    return schema


def fuzz(operation: Any, mode: GenerationMode, checks: list[Any], calls: dict[str, int]) -> None:
    @BOUNDED
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        calls[operation.label] = calls.get(operation.label, 0) + 1
        case.call_and_validate(headers=AUTH, checks=checks, timeout=10)

    run()


def test_every_operation_with_valid_and_invalid_data(api: VakitProcess) -> None:
    schema = load_schema(api)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    calls: dict[str, int] = {}
    for operation in operations:
        checks = READINESS_CHECKS if operation.path == "/readyz" else CHECKS
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                fuzz(operation, mode, checks, calls)
            except Unsatisfiable:
                # Nothing to make invalid (no parameters, no body): only the
                # valid pass applies to this operation.
                assert mode is GenerationMode.NEGATIVE, operation.label
    # Every operation was called (a GET without parameters once, the rest many times).
    assert set(calls) == {op.label for op in operations}


def test_linked_sequences(api: VakitProcess) -> None:
    schema = load_schema(api)
    machine = schema.as_state_machine()

    class Sequences(machine):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": AUTH, "timeout": 10}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            checks = READINESS_CHECKS if case.path == "/readyz" else CHECKS
            case.validate_response(response, checks=checks, headers=AUTH)

    Sequences.run(
        settings=settings(
            BOUNDED,
            max_examples=10,
            stateful_step_count=6,
        )
    )
