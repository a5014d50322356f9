"""The service layer without HTTP: a plain context (no web framework) runs
the rules of a create, and the one cron definition type round-trips
through its builder and its document."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import shardmap
from cluster.clock import FakeClock
from cluster.config import Settings
from cluster.cron.definition import ANCHOR, build_cron
from cluster.errors import InvalidRequest, PayloadTooLarge, ShardUnavailable
from cluster.instants import format_instant
from cluster.model import CreateJobParams, CreateResult, CronDefinition, GetJobParams
from cluster.services import crons, jobs
from cluster.services.cron_document import CreateCronIn, definition_of, document_of
from cluster.services.job_document import BatchJobIn
from cluster.services.quotas import OwnerLimits
from cluster.store.memory import MemStore
from cluster.store.memory_cron import MemCronStore

T0 = datetime(2027, 3, 1, 12, tzinfo=UTC)


class DownShardStore(MemStore):
    """A MemStore whose shard ``down`` refuses single creates."""

    down: int | None = None
    maybe_written = False

    async def create_job(self, shard: int, params: CreateJobParams) -> CreateResult:
        if shard == self.down:
            raise ShardUnavailable(
                f"shard {shard} is unavailable: test", shard=shard, maybe_written=self.maybe_written
            )
        return await super().create_job(shard, params)


class LocalServices:
    """What a local tool would hand the services: no tokens, no web framework."""

    def __init__(self, store: MemStore, clock: FakeClock) -> None:
        self.settings = Settings(shards=["mem-0", "mem-1"], max_payload_bytes=64)
        self.store = store
        self.crons = MemCronStore(store)
        self.clock = clock
        self.shards = shardmap.SlotMap.modulo(store.shard_count)
        self.limits = OwnerLimits(self.settings)
        self.keys_in_flight: set[tuple[str, str]] = set()
        self.refused: set[str] = set()

    def check_target(self, target: dict[str, Any], owner: str) -> None:
        if target["kind"] in self.refused:
            raise InvalidRequest("refused here", field="target.kind")

    def check_payload(self, payload: Any) -> None:
        if len(repr(payload)) > self.settings.max_payload_bytes:
            raise PayloadTooLarge("too large", size=0, limit=0, field="payload")


def new_job(run_at: datetime, **over: Any) -> BatchJobIn:
    values: dict[str, Any] = {
        "type": "t", "runAt": format_instant(run_at), "target": {"kind": "NOOP"},
        "payload": {"n": 1},
    }  # fmt: skip
    values.update(over)
    return BatchJobIn.model_validate(values)


@pytest.fixture
def ctx() -> LocalServices:
    return LocalServices(DownShardStore(2), FakeClock(T0))


def test_the_store_places_a_job_near_or_far_on_its_own_clock(ctx: LocalServices) -> None:
    # The services no longer decide near/far on this host's clock: every create
    # carries the horizon, and the store compares run_at with its now().
    for run_at in (T0, T0 + timedelta(days=30)):
        params = jobs.prepare(ctx, "svc", new_job(run_at), None, None)
        assert params.far_horizon_seconds == ctx.settings.far_horizon_seconds
        assert params.far is False


async def test_a_keyless_create_fails_over_to_a_shard_that_answers(ctx: LocalServices) -> None:
    ctx.store.down = 0  # type: ignore[attr-defined]
    for _ in range(20):  # whatever shard each random id draws first
        result = await jobs.create_job(ctx, "svc", new_job(T0 + timedelta(minutes=5)), None)
        assert result.created
        assert ctx.shards.shard_of(result.job.id) == 1
        found = await ctx.store.get_job(1, GetJobParams(result.job.id, "svc"))
        assert found is not None


async def test_a_create_that_may_have_committed_is_not_made_again_elsewhere(
    ctx: LocalServices,
) -> None:
    ctx.store.down, ctx.store.maybe_written = 0, True  # type: ignore[attr-defined]
    refused = 0
    for _ in range(20):
        try:
            result = await jobs.create_job(ctx, "svc", new_job(T0), None)
        except ShardUnavailable as exc:
            refused += 1
            assert exc.maybe_written and exc.fields["job_id"] in exc.message
            continue
        assert ctx.shards.shard_of(result.job.id) == 1  # it drew shard 1 first
    assert refused > 0


async def test_a_keyed_job_lives_on_its_keys_shard_and_a_repeat_finds_it(ctx: LocalServices) -> None:
    first = await jobs.create_job(ctx, "svc", new_job(T0), "k1")
    again = await jobs.create_job(ctx, "svc", new_job(T0), "k1")
    assert first.created and not again.created and again.job.id == first.job.id
    assert shardmap.slot_of(first.job.id) == shardmap.key_slot("svc", "k1")


async def test_a_batch_answers_each_item_by_its_index(ctx: LocalServices) -> None:
    ctx.refused.add("KAFKA")
    outcomes = await jobs.create_jobs(
        ctx,
        "svc",
        [(0, new_job(T0, idempotencyKey="k")), (3, new_job(T0, target={"kind": "KAFKA", "topic": "x"})),
         (5, new_job(T0, payload="x" * 100))],
    )  # fmt: skip
    assert isinstance(outcomes[0], CreateResult) and outcomes[0].created
    assert outcomes[0].job.idempotency_key == "k"
    assert isinstance(outcomes[3], InvalidRequest)
    assert isinstance(outcomes[5], PayloadTooLarge)


def definition(**over: Any) -> CronDefinition:
    values: dict[str, Any] = {
        "name": "billing.settle", "schedule": "0 2 * * *", "time_zone": "Europe/Istanbul",
        "target": {"kind": "NOOP"},
    }  # fmt: skip
    values.update(over)
    return CronDefinition(**values)


def test_a_record_holds_its_definition_and_its_fingerprint() -> None:
    d = definition(max_runs=3, start_at=T0 + timedelta(days=1))
    cron_id = shardmap.new_uuid()
    record = build_cron(d, cron_id=cron_id, owner="svc", now=T0, min_interval=timedelta(0))
    assert record.fingerprint == d.fingerprint()
    assert record.definition == d._replace(type=d.name[:64])
    assert record.anchor == ANCHOR and record.next_fire_at is not None
    assert record.next_fire_at >= T0 + timedelta(days=1)


def test_the_fingerprint_reads_what_the_definition_says_not_its_name() -> None:
    assert definition().fingerprint() == definition(name="other").fingerprint()
    assert definition().fingerprint() != definition(max_runs=5).fingerprint()
    assert definition().fingerprint() != definition(schedule="0 3 * * *").fingerprint()


def test_a_definition_that_never_fires_again_is_refused() -> None:
    d = definition(end_at=T0 - timedelta(days=1))
    with pytest.raises(InvalidRequest) as caught:
        build_cron(d, cron_id=shardmap.new_uuid(), owner="svc", now=T0, min_interval=timedelta(0))
    assert caught.value.fields["field"] == "endAt"


def test_a_definitions_document_reads_back_as_the_same_definition() -> None:
    d = definition(type="settle", payload={"a": 1}, end_at=T0 + timedelta(days=30), max_runs=4)
    doc = document_of(d)
    assert doc["timeZone"] == "Europe/Istanbul" and doc["endAt"] == "2027-03-31T12:00:00Z"
    assert definition_of(CreateCronIn.model_validate(doc)) == d
    compact = document_of(d, compact=True)
    assert "misfirePolicy" not in compact and compact["maxRuns"] == 4
    assert definition_of(CreateCronIn.model_validate(compact)) == d
    assert document_of(definition(), compact=True) == {
        "name": "billing.settle", "schedule": "0 2 * * *", "timeZone": "Europe/Istanbul",
        "target": {"kind": "NOOP"},
    }  # fmt: skip


async def test_a_change_that_leaves_the_timing_keeps_the_materializers_slot(
    ctx: LocalServices,
) -> None:
    saved, _, created = await crons.define_cron(ctx, "svc", definition())
    assert created
    ctx.clock.advance(timedelta(days=3))  # the first slot is in the past now
    changed, _ = await crons.change_cron(ctx, "svc", saved.id_text, {"payload": {"b": 2}})
    assert changed.next_fire_at == saved.next_fire_at and changed.payload == {"b": 2}
    moved, _ = await crons.change_cron(ctx, "svc", saved.id_text, {"schedule": "0 3 * * *"})
    assert moved.next_fire_at is not None and moved.next_fire_at > ctx.clock.now()
