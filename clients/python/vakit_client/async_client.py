"""The asyncio client: :class:`~vakit_client.Client`'s methods, awaited
(the searches are async iterators). Both send the calls of
:mod:`vakit_client.calls`; the docstrings are on :class:`Client`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import httpx

from vakit_client import calls
from vakit_client.crons_as_code import plan_changes
from vakit_client.models import (
    BackfillResult,
    BatchItem,
    CreatedJob,
    Cron,
    CronChange,
    Job,
    Preview,
    Triggered,
)
from vakit_client.retrying import Call, RetryPolicy
from vakit_client.settings import DEFAULT_TIMEOUT, http_options

__all__ = ["AsyncClient"]

T = TypeVar("T")


class AsyncClient:
    """A Vakit API client for one owner's token, on asyncio (see :class:`Client`)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        options = http_options(base_url, token, timeout)
        self._http = http or httpx.AsyncClient(**options)
        if http is not None:
            http.base_url = options["base_url"]
            http.headers.update(options["headers"])
        self.retry = retry or RetryPolicy()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        attempts = self.retry.start(call)
        while True:
            try:
                response = await self._http.send(attempts.request(self._http))
            except httpx.TransportError as exc:
                await asyncio.sleep(attempts.wait_or_raise(exc))
                continue
            if response.is_success:
                return call.parse(response)
            await asyncio.sleep(attempts.wait_or_raise(response))

    # -- jobs ----------------------------------------------------------------

    async def create_job(
        self,
        *,
        type: str,
        run_at: datetime | str,
        target: Mapping[str, Any],
        payload: Any = None,
        idempotency_key: str | None = None,
        **options: Any,
    ) -> CreatedJob:
        spec = {"type": type, "run_at": run_at, "target": target, "payload": payload, **options}
        return await self.send(calls.create_job(spec, idempotency_key))

    async def create_jobs(
        self, jobs: Sequence[calls.JobSpec | Mapping[str, Any]]
    ) -> list[BatchItem]:
        return await self.send(calls.create_jobs(jobs))

    async def get_job(self, job_id: str) -> Job:
        return await self.send(calls.job("GET", job_id))

    async def reschedule_job(self, job_id: str, run_at: datetime | str) -> Job:
        body = calls.api_fields({"run_at": run_at})
        return await self.send(calls.job("PATCH", job_id, body=body))

    patch_job = reschedule_job

    async def cancel_job(self, job_id: str) -> Job:
        return await self.send(calls.job("DELETE", job_id))

    async def retry_job(self, job_id: str) -> Job:
        return await self.send(calls.job("POST", job_id, "retry"))

    async def pause_job(self, job_id: str, reason: str) -> Job:
        return await self.send(calls.job("POST", job_id, "pause", {"reason": reason}))

    async def resume_job(self, job_id: str) -> Job:
        return await self.send(calls.job("POST", job_id, "resume"))

    async def search_jobs(
        self,
        *,
        status: str | Sequence[str] | None = None,
        type: str | None = None,
        cron_job_id: str | None = None,
        run_at_from: datetime | str | None = None,
        run_at_to: datetime | str | None = None,
        finished_from: datetime | str | None = None,
        finished_to: datetime | str | None = None,
        labels: Mapping[str, str] | None = None,
        page_size: int = 100,
        attempts: bool = False,
        allow_partial: bool = False,
    ) -> AsyncIterator[Job]:
        query = calls.search_query(
            status=status, type=type, cron_job_id=cron_job_id, run_at_from=run_at_from,
            run_at_to=run_at_to, finished_from=finished_from, finished_to=finished_to,
            labels=labels, page_size=page_size, attempts=attempts,
        )  # fmt: skip
        cursor: str | None = None
        while True:
            page = await self.send(calls.jobs_page(query, cursor, allow_partial))
            for job in page.jobs:
                yield job
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    # -- cron jobs -----------------------------------------------------------

    async def create_cron(
        self, *, name: str, schedule: str, time_zone: str, target: Mapping[str, Any], **options: Any
    ) -> Cron:
        fields = {"name": name, "schedule": schedule, "time_zone": time_zone, "target": target}
        return await self.send(calls.create_cron({**fields, **options}))

    async def get_cron(self, cron_id: str) -> Cron:
        return await self.send(calls.cron("GET", cron_id))

    async def update_cron(self, cron_id: str, **fields: Any) -> Cron:
        return await self.send(calls.cron("PATCH", cron_id, body=calls.api_fields(fields)))

    async def delete_cron(self, cron_id: str) -> None:
        await self.send(calls.delete_cron(cron_id))

    async def list_crons(self) -> AsyncIterator[Cron]:
        after = ""
        while True:
            page, cursor = await self.send(calls.crons_page(after))
            for cron in page:
                yield cron
            if not cursor:
                return
            after = cursor

    async def pause_cron(self, cron_id: str, reason: str) -> Cron:
        return await self.send(calls.cron("POST", cron_id, "pause", {"reason": reason}))

    async def resume_cron(self, cron_id: str) -> Cron:
        return await self.send(calls.cron("POST", cron_id, "resume"))

    async def trigger_cron(self, cron_id: str) -> Triggered:
        return await self.send(calls.trigger(cron_id))

    async def preview_cron(
        self, cron_id: str, *, start: datetime | str | None = None, count: int = 10
    ) -> Preview:
        return await self.send(calls.preview(cron_id, start, count))

    async def backfill_cron(
        self,
        cron_id: str,
        start: datetime | str,
        end: datetime | str,
        *,
        overlap: str = "ALLOW",
        rerun: bool = False,
        dry_run: bool = False,
    ) -> BackfillResult:
        result: BackfillResult | None = None
        while True:
            page = await self.send(
                calls.backfill(cron_id, start, end, overlap=overlap, rerun=rerun, dry_run=dry_run)
            )
            result = page if result is None else result.merged(page)
            if page.next_from is None:
                return result
            start = page.next_from

    async def apply_crons(
        self,
        definitions: Sequence[Mapping[str, Any]],
        *,
        owns: str | None = None,
        prune: bool = False,
        dry_run: bool = False,
    ) -> list[CronChange]:
        server = [c async for c in self.list_crons()]
        changes = plan_changes(definitions, server, owns, prune)
        for change in [] if dry_run else changes:
            if change.action == "create":
                await self.send(calls.create_cron(change.fields))
            elif change.action == "update" and change.cron_job_id:
                await self.send(calls.cron("PATCH", change.cron_job_id, body=change.fields))
            elif change.action == "delete" and change.cron_job_id:
                await self.send(calls.delete_cron(change.cron_job_id))
        return changes
