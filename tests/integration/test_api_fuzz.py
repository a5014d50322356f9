"""Fuzz a running ``vakit api`` process on real PostgreSQL shards from its own
OpenAPI document (schemathesis): no input may get a 5xx, every answer must be
what the document says (status, media type, body schema, headers), a request
the document allows is not refused with a 4xx other than 401/403/404/409/429
(positive_data_acceptance) and one it forbids is refused
(negative_data_rejection).

What the document cannot say, the generation is told here, each from the
server's rule it stands for (and said in the document's descriptions): a
target URL's host must be granted (this API allows hooks.example.com); a
schedule must fire, at most once a minute (a subset of the grammar that
always does); startAt must not be after endAt (startAt before 2000, endAt
after); a backfill's range must be ordered, past and within the history's
retention (the two days before today); a calendar named
by a cron must exist (none is named); a calendar's day may not be both
excluded and included (excluded before 2050, included after); a target kind must be offered (no
KAFKA: no Kafka cluster here); an HTTP target's header names must not be on
the deny list or Vakit's own; no string holds a NUL character (I-JSON, said
once in the document's description). An Idempotency-Key is made unique per
request (a key repeated with another body is a 422 by the server's state);
a search asks one label filter (a key asked with two values is a 422).

Two passes, each bounded (VAKIT_FUZZ_EXAMPLES examples, 4 by default;
derandomized, no shrinking): every operation with data that fits the document and with data
that does not; then sequences that follow the document's links (a created
job or cron's id fed to what reads, changes, triggers or deletes it).
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
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
    negative_data_rejection,
    positive_data_acceptance,
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
    positive_data_acceptance,
    negative_data_rejection,
]
# /readyz answers 503 while no worker polls the shards (none runs here): its
# documented answer, not a server error; the document still has to say so.
READINESS_CHECKS = [c for c in CHECKS if c is not not_a_server_error]
# Bounded and repeatable: the same examples every run, none saved between
# runs, no shrinking (a failure prints the request that caused it).
# Examples per operation and mode, and sequences: few in the suite (it must
# stay cheap); VAKIT_FUZZ_EXAMPLES=100 for a longer run.
EXAMPLES = int(os.environ.get("VAKIT_FUZZ_EXAMPLES", "4"))
BOUNDED = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def api(
    pg_servers: list[PgServer], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VakitProcess]:
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


# The server's rules no schema can say (see the module's docstring), as the
# narrower schemas the generation draws from: each is a subset of what the
# document allows and of what the server accepts.
_GRANTED_URL = "^https://hooks[.]example[.]com(/[a-z0-9]{0,12}){0,3}$"
_FIRING_SCHEDULE = (
    "^([1-5]?[0-9]) ([01]?[0-9]|2[0-3]) [*] [*] [*]$"
    "|^every ([1-9][0-9]?m|[1-9]h|1d)$|^@(daily|hourly|weekly|monthly)$"
)
_EARLY = "^19[89][0-9]-0[1-9]-1[0-9]T0[0-9]:00:00Z$"
_LATE = "^2[1-8][0-9][0-9]-0[1-9]-1[0-9]T0[0-9]:00:00Z$"
# A backfill's range: ordered, past, and within the history's retention.
_TODAY = datetime.now(UTC).date()
_PAST_FROM = f"^{_TODAY - timedelta(days=2)}T0[0-9]:00:00Z$"
_PAST_TO = f"^{_TODAY - timedelta(days=1)}T0[0-9]:00:00Z$"
_DAY_BEFORE_2050 = "^(19[0-9]{2}|20[0-4][0-9])-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])$"
_DAY_FROM_2050 = "^(20[5-9][0-9]|21[0-9]{2})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])$"
_HEADER_NAME = "^X-Fuzz-[A-Za-z0-9]{1,8}$"


def _narrow(spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    # A search's label filters: one (a key asked with two values is a 422).
    for param in spec["paths"]["/api/v1/jobs"]["get"]["parameters"]:
        if param["name"] == "label":
            for branch in param["schema"].get("anyOf", []):
                if branch.get("type") == "array":
                    branch["maxItems"] = 1
    for name, schema in spec["components"]["schemas"].items():
        props = schema.get("properties", {})
        rules = {
            "url": _GRANTED_URL if name.startswith("Http") else None,
            "schedule": _FIRING_SCHEDULE,
            "startAt": _EARLY,
            "endAt": _LATE,
            "from": _PAST_FROM if name == "BackfillIn" else None,
            "to": _PAST_TO if name == "BackfillIn" else None,
        }
        for prop, pattern in rules.items():
            if prop in props and pattern is not None:
                _set_pattern(props[prop], pattern)
        if "target" in props:
            _without_kafka(props["target"])
        if "headers" in props and name.startswith("Http"):
            for branch in props["headers"].get("anyOf", []):
                if branch.get("type") == "object":
                    branch["propertyNames"] = {"pattern": _HEADER_NAME}
        if "excludeDates" in props and "includeDates" in props:
            props["excludeDates"]["items"]["pattern"] = _DAY_BEFORE_2050
            props["includeDates"]["items"]["pattern"] = _DAY_FROM_2050
        if "calendar" in props and not name.endswith("Out"):
            del props["calendar"]
            props.pop("calendarPolicy", None)
    return spec


def _without_kafka(prop: dict[str, Any]) -> None:
    """No Kafka cluster here: the document lists every registered kind, and
    a kind this deployment does not offer is a 422."""
    for branch in prop.get("anyOf", [prop]):
        if "oneOf" in branch:
            branch["oneOf"] = [b for b in branch["oneOf"] if "Kafka" not in b.get("$ref", "")]
            branch.get("discriminator", {}).get("mapping", {}).pop("KAFKA", None)


def _set_pattern(prop: dict[str, Any], pattern: str) -> None:
    for branch in prop.get("anyOf", [prop]):
        if branch.get("type") == "string":
            branch.pop("format", None)
            branch["pattern"] = pattern


def load_schema(api: VakitProcess) -> Any:
    with urllib.request.urlopen(api.base_url + "/openapi.json", timeout=5) as resp:
        spec = _narrow(json.loads(resp.read()))
    schema = schemathesis.openapi.from_dict(spec)
    # No NUL in any string: the strict JSON rule of every request (the
    # document's description), which no per-field schema repeats.
    schema.config.generation.update(allow_x00=False)
    # A request the document forbids may also be refused for its size (413:
    # a body over the configured limit), which is a refusal as well.
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413"]
    schema.config.base_url = api.base_url
    return schema


_KEYS = itertools.count()


def _fresh_key(case: Any) -> None:
    """A valid Idempotency-Key made unique per request, as a client makes one
    per call: a key the generator repeats with another body is a 422
    (idempotency-key-reused), a rule of the server's state, not of the
    request. An invalid key (empty, too long) is left as it is."""
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and 1 <= len(key) <= 180:
        case.headers["Idempotency-Key"] = f"{key}-{next(_KEYS)}"


def fuzz(operation: Any, mode: GenerationMode, checks: list[Any], calls: dict[str, int]) -> None:
    @BOUNDED
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        calls[operation.label] = calls.get(operation.label, 0) + 1
        _fresh_key(case)
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
            _fresh_key(case)
            return {"headers": AUTH, "timeout": 10}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            checks = READINESS_CHECKS if case.path == "/readyz" else CHECKS
            case.validate_response(response, checks=checks, headers=AUTH)

    Sequences.run(
        settings=settings(
            BOUNDED,
            # Sequences are cheap (most steps read): more of them.
            max_examples=max(10, EXAMPLES),
            stateful_step_count=6,
        )
    )


def test_405_and_options_name_every_method_of_the_path(api: VakitProcess) -> None:
    """A method a path does not serve (OPTIONS and HEAD included) is a 405
    whose ``Allow`` lists exactly the path's operations in the document,
    whichever of the path's routes the router tried first."""
    with urllib.request.urlopen(api.base_url + "/openapi.json", timeout=5) as resp:
        paths = json.loads(resp.read())["paths"]
    order = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
    checked = 0
    for path, operations in paths.items():
        declared = {m.upper() for m in operations}
        url = api.base_url + path.replace("{", "x").replace("}", "")
        for method in ["OPTIONS", *(m for m in order if m not in declared)][:2]:
            request = urllib.request.Request(url, method=method, headers=AUTH)
            try:
                urllib.request.urlopen(request, timeout=5)
                status, allow = 200, ""
            except urllib.error.HTTPError as err:
                status, allow = err.code, err.headers.get("Allow", "")
            assert status == 405, (method, path, status)
            assert allow == ", ".join(m for m in order if m in declared), (method, path, allow)
            checked += 1
    assert checked >= 40
