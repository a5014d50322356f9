"""Log lines: level from the settings, request/owner/job context bound per request and per firing."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

import shardmap
from cluster import logs
from cluster.api.jobs import parse_job_id
from cluster.clock import FakeClock
from cluster.config import Settings
from cluster.store.memory import MemStore
from cluster.targets import FireResult
from tests.unit.test_state_machine import FakeTarget, add_job, make_worker, settle
from tests.unit.test_state_machine import clock as clock
from tests.unit.test_state_machine import store as store


def test_a_job_route_binds_the_job_id_for_the_rest_of_the_request() -> None:
    text = shardmap.encode_id("job", shardmap.new_uuid(None))
    with logs.bound(request_id="r-7", owner="svc-a"):
        parse_job_id(text)
        assert logs.context() == {"request_id": "r-7", "owner": "svc-a", "job_id": text}
    assert logs.context() == {}


@pytest.fixture
def root_logger() -> Iterator[None]:
    """setup_logging replaces the root's handlers and level: put them back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {n: logging.getLogger(n).level for n in ("psycopg.pool", "kazoo.client")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, value in levels.items():
        logging.getLogger(name).setLevel(value)


@pytest.mark.usefixtures("root_logger")
def test_lines_are_json_with_the_bound_fields_and_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    logs.setup_logging("api", "warning")
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    monkeypatch.setattr(handler, "stream", stream)
    log = logging.getLogger("vakit.test")
    with logs.bound(request_id="r-1", owner="svc-a"):
        log.info("not at warning level")
        log.warning("slow shard", extra={"shard": 1})
    (line,) = stream.getvalue().splitlines()
    fields = json.loads(line)
    assert fields["level"] == "warning" and fields["msg"] == "slow shard"
    assert (fields["request_id"], fields["owner"], fields["shard"]) == ("r-1", "svc-a", 1)


@pytest.mark.usefixtures("root_logger")
def test_the_level_setting_is_checked() -> None:
    assert Settings(log_level="DEBUG").log_level == "DEBUG"
    with pytest.raises(ValidationError):
        Settings(log_level="verbose")
    with pytest.raises(ValueError):
        logs.setup_logging("api", "verbose")


@pytest.mark.usefixtures("root_logger")
async def test_a_firing_logs_with_its_job_bound(store: MemStore, clock: FakeClock) -> None:
    """What a target logs while it fires names the job, its attempt, shard and
    owner, though the target passed none of them; the worker's own context
    does not keep them."""
    stream = io.StringIO()
    logs.setup_logging("worker", "info")
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.stream = stream

    async def noisy(job: object) -> FireResult:
        logging.getLogger("vakit.targets.test").warning("receiver answered slowly")
        return FireResult.success()

    created = await add_job(store)
    worker = make_worker(store, clock, FakeTarget(noisy))
    assert await worker.run_once(0) == 1
    await settle(worker)
    (line,) = [json.loads(ln) for ln in stream.getvalue().splitlines() if "slowly" in ln]
    assert line["job_id"] == shardmap.encode_id("job", created.id)
    assert (line["shard"], line["attempt"], line["owner"]) == (0, 1, "svc")
    assert logs.context() == {}
