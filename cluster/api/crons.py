"""The cron-jobs API under ``/api/v1/cron-jobs``."""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import json
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from fastapi import Depends, FastAPI, Query, Response
from pydantic import BaseModel, Field, model_validator

import shardmap
from cluster.api.schemas import TargetIn, UtcDatetime, _Strict, parse_rfc3339
from cluster.clock import utc
from cluster.cron.plan import cron_slot, schedule_of
from cluster.cron.schedule import parse_schedule
from cluster.errors import InvalidRequest, NotFound
from cluster.model import CronRecord, Occurrence
from cluster.store.postgres_cron import PgCronStore

__all__ = ["register_cron_routes"]

Misfire = Literal["RUN_ALL", "RUN_ONCE", "SKIP"]
Concurrency = Literal["ALLOW", "FORBID", "REPLACE"]
_NAME = r"^[A-Za-z0-9_.:-]+$"
# The Unix epoch anchors fixed-rate schedules: `every 15m` fires at :00, :15, …
_ANCHOR = datetime(1970, 1, 1, tzinfo=UTC)


class CreateCronIn(_Strict):
    name: str = Field(min_length=1, max_length=128, pattern=_NAME)
    schedule: str = Field(min_length=1, max_length=200, description="5-field cron, @macro, 'every 15m' or 'every 15m fixed-delay'.")
    timeZone: str = Field("UTC", min_length=1, max_length=64)
    type: str | None = Field(None, min_length=1, max_length=64, pattern=_NAME)
    target: TargetIn
    payload: Any = None
    misfirePolicy: Misfire = "RUN_ONCE"
    concurrency: Concurrency = "ALLOW"
    jitterSeconds: int = Field(0, ge=0, le=86400)
    maxAttempts: int = Field(3, ge=1, le=100)
    timeoutSeconds: int = Field(60, ge=1, le=86400)
    startingDeadlineSeconds: int | None = Field(None, ge=1, le=7 * 86400)
    enabled: bool = True


class PatchCronIn(_Strict):
    schedule: str | None = Field(None, min_length=1, max_length=200)
    timeZone: str | None = Field(None, min_length=1, max_length=64)
    type: str | None = Field(None, min_length=1, max_length=64, pattern=_NAME)
    target: TargetIn | None = None
    payload: Any = None
    misfirePolicy: Misfire | None = None
    concurrency: Concurrency | None = None
    jitterSeconds: int | None = Field(None, ge=0, le=86400)
    maxAttempts: int | None = Field(None, ge=1, le=100)
    timeoutSeconds: int | None = Field(None, ge=1, le=86400)
    startingDeadlineSeconds: int | None = Field(None, ge=1, le=7 * 86400)
    enabled: bool | None = None

    @model_validator(mode="after")
    def _no_null_for_required(self) -> PatchCronIn:
        # Absent means "keep"; null is only meaningful where the field may be
        # empty (payload, startingDeadlineSeconds). Elsewhere it was a 500.
        nulled = sorted(k for k in self.model_fields_set - _NULLABLE if getattr(self, k) is None)
        if nulled:
            raise ValueError(f"{', '.join(nulled)} cannot be null; leave a field out to keep it")
        return self


_NULLABLE = {"payload", "startingDeadlineSeconds"}


class CronOut(BaseModel):
    cronJobId: str
    name: str
    schedule: str
    scheduleKind: str
    timeZone: str
    type: str
    target: dict[str, Any]
    payload: Any
    misfirePolicy: str
    concurrency: str
    jitterSeconds: int
    maxAttempts: int
    timeoutSeconds: int
    startingDeadlineSeconds: int | None
    enabled: bool
    shard: int
    nextFireAt: UtcDatetime | None
    lastFireAt: UtcDatetime | None
    lastSuccessAt: UtcDatetime | None
    missedCount: int
    skippedCount: int
    createdAt: UtcDatetime | None
    updatedAt: UtcDatetime | None


class CronListOut(BaseModel):
    items: list[CronOut]
    nextCursor: str | None


class FireOut(BaseModel):
    scheduledFor: UtcDatetime
    local: str
    note: str | None


class PreviewOut(BaseModel):
    fires: list[FireOut]


class RunOut(BaseModel):
    jobId: str
    scheduledFor: UtcDatetime
    runAt: UtcDatetime
    status: str
    attempt: int
    lastError: str | None
    finishedAt: UtcDatetime | None
    latenessSeconds: float | None


class RunsOut(BaseModel):
    runs: list[RunOut]


class TriggerOut(BaseModel):
    jobId: str
    scheduledFor: UtcDatetime


_DEFINING = (
    "schedule", "time_zone", "type", "target", "payload", "misfire_policy", "concurrency",
    "jitter_seconds", "max_attempts", "timeout_seconds", "starting_deadline_seconds", "enabled",
)  # fmt: skip


def definition_fingerprint(values: dict[str, Any]) -> str:
    canonical = json.dumps({k: values[k] for k in _DEFINING}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def cron_out(c: CronRecord, shard: int) -> CronOut:
    return CronOut(
        cronJobId=c.id_text,
        name=c.name,
        schedule=c.schedule,
        scheduleKind=c.schedule_kind,
        timeZone=c.time_zone,
        type=c.type,
        target=c.target,
        payload=c.payload,
        misfirePolicy=c.misfire_policy,
        concurrency=c.concurrency,
        jitterSeconds=c.jitter_seconds,
        maxAttempts=c.max_attempts,
        timeoutSeconds=c.timeout_seconds,
        startingDeadlineSeconds=c.starting_deadline_seconds,
        enabled=c.enabled,
        shard=shard,
        nextFireAt=c.next_fire_at,
        lastFireAt=c.last_fire_at,
        lastSuccessAt=c.last_success_at,
        missedCount=c.missed_count,
        skippedCount=c.skipped_count,
        createdAt=c.created_at,
        updatedAt=c.updated_at,
    )


def register_cron_routes(app: FastAPI, ctx: Any, owner_dep: Any) -> None:
    """Add the cron-jobs routes; ``ctx`` is the API's :class:`~cluster.api.ApiContext`."""
    from cluster.api.app import check_target, raise_payload_too_large

    crons = PgCronStore(ctx.store)
    settings = ctx.settings
    min_interval = timedelta(seconds=settings.cron_min_interval_seconds)

    def parse_id(text: str) -> tuple[Any, int]:
        try:
            value = shardmap.decode_id("cron", text)
        except ValueError as exc:
            raise NotFound(str(exc)) from exc
        return value, ctx.shards.shard_of(value)

    def build(values: dict[str, Any], cron_id: Any, owner: str, name: str, now: datetime) -> CronRecord:
        check_target(ctx, values["target"])
        size = len(json.dumps(values["payload"], separators=(",", ":")))
        if size > settings.max_payload_bytes:
            raise_payload_too_large(size, settings.max_payload_bytes)
        id_text = shardmap.encode_id("cron", cron_id)
        schedule = parse_schedule(
            values["schedule"], values["time_zone"], seed=id_text, min_interval=min_interval, anchor=_ANCHOR
        )
        first = schedule.next_fire(now)
        if first is None:
            raise InvalidRequest("schedule never fires again", field="schedule")
        return CronRecord(
            id=cron_id,
            owner=owner,
            name=name,
            schedule=values["schedule"],
            schedule_kind=schedule.kind,
            time_zone=values["time_zone"],
            type=values["type"] or name[:64],
            target=values["target"],
            payload=values["payload"],
            misfire_policy=values["misfire_policy"],
            concurrency=values["concurrency"],
            jitter_seconds=values["jitter_seconds"],
            max_attempts=values["max_attempts"],
            timeout_seconds=values["timeout_seconds"],
            starting_deadline_seconds=values["starting_deadline_seconds"],
            enabled=values["enabled"],
            anchor=_ANCHOR,
            next_fire_at=first.scheduled_for,
            fingerprint=definition_fingerprint(values),
        )

    async def load(cron_job_id: str, owner: str) -> tuple[CronRecord, int]:
        cron_id, shard = parse_id(cron_job_id)
        cron = await crons.get(shard, cron_id, owner)
        if cron is None:
            raise NotFound("no such cron job", cron_job_id=cron_job_id)
        return cron, shard

    @app.post("/api/v1/cron-jobs", status_code=201, response_model=CronOut, tags=["cron-jobs"])
    async def create_cron(body: CreateCronIn, response: Response, owner: str = Depends(owner_dep)) -> CronOut:
        """Define a cron job. The name is unique per owner; the same name with the
        same definition returns the existing one (200)."""
        values = {
            "schedule": body.schedule.strip(),
            "time_zone": body.timeZone,
            "type": body.type,
            "target": body.target.model_dump(exclude_none=True),
            "payload": body.payload,
            "misfire_policy": body.misfirePolicy,
            "concurrency": body.concurrency,
            "jitter_seconds": body.jitterSeconds,
            "max_attempts": body.maxAttempts,
            "timeout_seconds": body.timeoutSeconds,
            "starting_deadline_seconds": body.startingDeadlineSeconds,
            "enabled": body.enabled,
        }
        slot = cron_slot(owner, body.name)
        cron = build(values, shardmap.new_uuid(slot), owner, body.name, ctx.clock.now())
        shard = ctx.shards.shard_of_slot(slot)
        saved, created = await crons.create(shard, cron)
        if not created:
            response.status_code = 200
        return cron_out(saved, shard)

    @app.get("/api/v1/cron-jobs", response_model=CronListOut, tags=["cron-jobs"])
    async def list_crons(
        owner: str = Depends(owner_dep),
        limit: int = Query(50, ge=1, le=500),
        after: str = Query("", max_length=128, description="The nextCursor of the previous page."),
    ) -> CronListOut:
        """The owner's cron jobs by name, from every shard, a page at a time."""
        pages = [await crons.list_page(s, owner, after, limit) for s in range(ctx.shards.shard_count)]
        merged = list(heapq.merge(*pages, key=lambda c: c.name))[:limit]
        items = [cron_out(c, ctx.shards.shard_of(c.id)) for c in merged]
        more = len(merged) == limit and sum(len(p) for p in pages) > limit
        return CronListOut(items=items, nextCursor=merged[-1].name if more else None)

    @app.get("/api/v1/cron-jobs/{cron_job_id}", response_model=CronOut, tags=["cron-jobs"])
    async def get_cron(cron_job_id: str, owner: str = Depends(owner_dep)) -> CronOut:
        cron, shard = await load(cron_job_id, owner)
        return cron_out(cron, shard)

    @app.patch("/api/v1/cron-jobs/{cron_job_id}", response_model=CronOut, tags=["cron-jobs"])
    async def patch_cron(cron_job_id: str, body: PatchCronIn, owner: str = Depends(owner_dep)) -> CronOut:
        """Change the definition; applies to occurrences not yet created."""
        cron, shard = await load(cron_job_id, owner)
        given = body.model_dump(exclude_unset=True)
        values = {
            "schedule": given.get("schedule", cron.schedule).strip(),
            "time_zone": given.get("timeZone", cron.time_zone),
            "type": given.get("type", cron.type),
            "target": given["target"] if "target" in given else cron.target,
            "payload": given["payload"] if "payload" in given else cron.payload,
            "misfire_policy": given.get("misfirePolicy", cron.misfire_policy),
            "concurrency": given.get("concurrency", cron.concurrency),
            "jitter_seconds": given.get("jitterSeconds", cron.jitter_seconds),
            "max_attempts": given.get("maxAttempts", cron.max_attempts),
            "timeout_seconds": given.get("timeoutSeconds", cron.timeout_seconds),
            "starting_deadline_seconds": given.get("startingDeadlineSeconds", cron.starting_deadline_seconds),
            "enabled": given.get("enabled", cron.enabled),
        }
        if "target" in given and body.target is not None:
            values["target"] = body.target.model_dump(exclude_none=True)
        rebuilt = build(values, cron.id, owner, cron.name, ctx.clock.now())
        timing = ("schedule", "timeZone", "enabled")
        if not any(k in given for k in timing) and cron.next_fire_at is not None:
            # Same timing: keep the slot the materializer is at, so no slot is
            # skipped or repeated by an unrelated change.
            rebuilt = dataclasses.replace(rebuilt, next_fire_at=cron.next_fire_at)
        saved = await crons.update(shard, rebuilt)
        return cron_out(saved, shard)

    @app.delete("/api/v1/cron-jobs/{cron_job_id}", status_code=204, tags=["cron-jobs"])
    async def delete_cron(cron_job_id: str, owner: str = Depends(owner_dep)) -> Response:
        """Delete the definition; occurrences not yet started are cancelled."""
        cron_id, shard = parse_id(cron_job_id)
        await crons.delete(shard, cron_id, owner)
        return Response(status_code=204)

    @app.post(
        "/api/v1/cron-jobs/{cron_job_id}/trigger", status_code=201, response_model=TriggerOut, tags=["cron-jobs"]
    )
    async def trigger_cron(cron_job_id: str, owner: str = Depends(owner_dep)) -> TriggerOut:
        """One extra occurrence now, with its own scheduledFor."""
        cron, shard = await load(cron_job_id, owner)
        now = ctx.clock.now()
        when = now.replace(microsecond=now.microsecond // 1000 * 1000)
        occ = Occurrence(shardmap.new_uuid(shardmap.slot_of(cron.id)), when, when, None)
        if not await crons.trigger(shard, cron, occ):
            raise InvalidRequest("an occurrence for this instant exists already; retry")
        return TriggerOut(jobId=shardmap.encode_id("job", occ.job_id), scheduledFor=when)

    @app.get("/api/v1/cron-jobs/{cron_job_id}/preview", response_model=PreviewOut, tags=["cron-jobs"])
    async def preview_cron(
        cron_job_id: str,
        owner: str = Depends(owner_dep),
        from_: str | None = Query(None, alias="from", description="RFC 3339; default now."),
        count: int = Query(10, ge=1, le=1000),
    ) -> PreviewOut:
        """The next ``count`` fire instants strictly after ``from``, with DST notes."""
        cron, _ = await load(cron_job_id, owner)
        start = ctx.clock.now()
        if from_ is not None:
            try:
                start = utc(parse_rfc3339(from_, "from"))
            except ValueError as exc:
                raise InvalidRequest(str(exc), field="from") from exc
        fires = schedule_of(cron).fires(start, count=count)
        return PreviewOut(
            fires=[FireOut(scheduledFor=f.scheduled_for, local=f.local.isoformat(), note=f.note) for f in fires]
        )

    @app.get("/api/v1/cron-jobs/{cron_job_id}/runs", response_model=RunsOut, tags=["cron-jobs"])
    async def cron_runs(
        cron_job_id: str, owner: str = Depends(owner_dep), limit: int = Query(50, ge=1, le=500)
    ) -> RunsOut:
        """Recent occurrences, newest first, with status, attempts and lateness."""
        cron, shard = await load(cron_job_id, owner)
        runs = await crons.runs(shard, cron.id, limit)
        return RunsOut(
            runs=[
                RunOut(
                    jobId=shardmap.encode_id("job", r.job_id),
                    scheduledFor=r.scheduled_for,
                    runAt=r.run_at,
                    status=r.status,
                    attempt=r.attempt,
                    lastError=r.last_error,
                    finishedAt=r.finished_at,
                    latenessSeconds=r.lateness_seconds,
                )
                for r in runs
            ]
        )
