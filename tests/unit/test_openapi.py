"""The OpenAPI document tells the truth about errors, auth and names, and
every problem type it names has its page (issue 14).

What the API actually answers is checked against the same document by the
API test clients (tests/openapi_conformance.py) and by the fuzz run
(tests/integration/test_api_fuzz.py)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster.api.problems import KINDS, PROBLEM
from tests.unit.test_api_fast import A, serve, settings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "problems"


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    from cluster.api.app import create_app
    from cluster.store.memory import MemStore
    from cluster.store.memory_cron import MemCronStore

    store = MemStore(2)
    return create_app(settings(), store=store, crons=MemCronStore(store)).openapi()


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, ops in spec["paths"].items() for method, op in ops.items()]


def test_auth_is_a_security_scheme_not_a_header_parameter(spec: dict[str, Any]) -> None:
    assert spec["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    api_ops = [(p, m, op) for p, m, op in operations(spec) if p.startswith("/api/")]
    assert len(api_ops) >= 15
    for path, method, op in api_ops:
        assert op["security"] == [{"bearerAuth": []}], (method, path)
        names = [p["name"].lower() for p in op.get("parameters", [])]
        assert "authorization" not in names, (method, path)
        assert {"401", "403"} <= set(op["responses"]), (method, path)


def test_operation_ids_are_readable_and_unique(spec: dict[str, Any]) -> None:
    ids = [op["operationId"] for _, _, op in operations(spec)]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)*", i) for i in ids), ids
    assert {"createJob", "getJob", "patchJob", "deleteJob", "createJobsBatch", "createCron"} <= set(ids)


def test_every_error_is_a_problem_with_the_types_of_its_status(spec: dict[str, Any]) -> None:
    text = json.dumps(spec)
    assert "HTTPValidationError" not in text and "about:blank" not in text
    problem = spec["components"]["schemas"]["Problem"]
    assert set(problem["properties"]["type"]["enum"]) == {k.type for k in KINDS.values()}
    for path, method, op in operations(spec):
        for status, response in op["responses"].items():
            if int(status) < 400 or path == "/readyz":
                continue
            content = response["content"]
            assert list(content) == [PROBLEM], (method, path, status)
            schema = content[PROBLEM]["schema"]
            refs = json.dumps(schema)
            assert "#/components/schemas/Problem" in refs
            if "allOf" in schema:
                types = schema["allOf"][1]["properties"]["type"]["enum"]
                assert types and all(KINDS[t.rsplit("/", 1)[1]].status == int(status) for t in types)
    # What applies where: a body can be too large, a resource missing, a state in conflict.
    create = spec["paths"]["/api/v1/jobs"]["post"]["responses"]
    assert {"400", "409", "413", "422", "429", "503"} <= set(create)
    assert "/problems/idempotency-key-in-flight" in create["409"]["description"]
    assert "/problems/idempotency-key-reused" in create["422"]["description"]
    assert create["200"]["headers"]["Idempotent-Replayed"]["schema"]["enum"] == ["true"]
    assert "Retry-After" in create["429"]["headers"] and "Retry-After" in create["503"]["headers"]
    assert "404" in spec["paths"]["/api/v1/jobs/{job_id}"]["get"]["responses"]
    assert "409" in spec["paths"]["/api/v1/jobs/{job_id}"]["patch"]["responses"]
    assert "413" not in spec["paths"]["/api/v1/jobs/{job_id}"]["get"]["responses"]


def test_the_idempotency_key_lifetime_is_published(spec: dict[str, Any]) -> None:
    params = spec["paths"]["/api/v1/jobs"]["post"]["parameters"]
    key = next(p for p in params if p["name"] == "Idempotency-Key")
    assert "VAKIT_HISTORY_RETENTION_DAYS" in key["description"]
    assert key["schema"]["maxLength"] == 200


@pytest.fixture
async def api() -> AsyncIterator[httpx.AsyncClient]:
    from cluster.api.app import create_app
    from cluster.store.memory import MemStore
    from cluster.store.memory_cron import MemCronStore

    store = MemStore(2)
    async for client in serve(create_app(settings(), store=store, crons=MemCronStore(store))):
        yield client


async def test_every_problem_type_has_its_page_served_where_its_uri_points(api: httpx.AsyncClient) -> None:
    pages = {p.stem for p in DOCS.glob("*.md")} - {"README"}
    assert pages == set(KINDS)
    index = (DOCS / "README.md").read_text()
    for slug, kind in KINDS.items():
        assert f"/problems/{slug}" in index
        r = await api.get(kind.type)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/markdown")
        assert r.text == (DOCS / f"{slug}.md").read_text() and str(kind.status) in r.text
    missing = await api.get("/problems/no-such-kind")
    assert missing.status_code == 404 and missing.json()["type"] == "/problems/not-found"
    # A type a client receives resolves against the API that sent it.
    r = await api.get("/api/v1/jobs/job_01M8NDCRQPEVT9TKBNSP4S1NEN", headers=A)
    page = await api.get(str(r.url.join(r.json()["type"])))
    assert page.status_code == 200 and page.text.startswith("# Not found")


def test_the_conformance_check_refuses_what_the_document_does_not_say(spec: dict[str, Any]) -> None:
    # The hook the API test clients install is not a no-op: each of these
    # answers would fail the test that received it.
    from tests.openapi_conformance import NotConforming, OpenApiChecker

    checker = OpenApiChecker(spec)
    problem = json.dumps({"type": "/problems/conflict", "title": "Conflict", "status": 409, "detail": "x"})
    checker.check("PATCH", "/api/v1/jobs/job_1", 409, PROBLEM, problem.encode())  # documented
    bad = [
        ("GET", "/api/v1/jobs/job_1", 409, PROBLEM, problem),  # a 409 getJob does not document
        ("PATCH", "/api/v1/jobs/job_1", 409, "application/json", problem),  # wrong media type
        ("PATCH", "/api/v1/jobs/job_1", 409, PROBLEM, '{"type": "about:blank", "title": "t", "status": 409, "detail": "d"}'),
        ("GET", "/api/v1/jobs/job_1", 200, "application/json", '{"jobId": 1}'),  # body off the schema
        ("GET", "/api/v1/nowhere", 200, "application/json", "{}"),  # no such operation
    ]
    for method, path, status, media, body in bad:
        with pytest.raises(NotConforming):
            checker.check(method, path, status, media, body.encode())
