"""The asyncio client. Both clients send the calls of :mod:`vakit_client.calls`;
this one is the source of the other: ``client.py`` (:class:`Client`) is
written from it by ``clients/python/tools/async_to_sync.py``, which takes the
asyncio out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import date, datetime
from typing import Any, TypeVar

import httpx

from vakit_client import calls
from vakit_client.crons_as_code import plan_changes
from vakit_client.models import (
    BackfillResult,
    BatchItem,
    Calendar,
    CreatedJob,
    Cron,
    CronChange,
    Job,
    Limit,
    Preview,
    Triggered,
)
from vakit_client.retrying import Call, RetryPolicy
from vakit_client.settings import DEFAULT_TIMEOUT, http_options

__all__ = ["AsyncClient"]

T = TypeVar("T")


class AsyncClient:
    """A Vakit API client for one owner's token.

    ``base_url`` is the API's address without ``/api/v1`` (it is taken off
    when given). Every call has a timeout (``timeout``, default 10 s and 5 s
    to connect) and is retried as :class:`RetryPolicy` says; pass ``http``
    to bring your own ``httpx.AsyncClient`` (its base URL and auth are set here).
    """

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
        """Send one call, waiting and sending again as the retry policy says."""
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
        """Schedule a one-shot job. ``idempotency_key`` defaults to a new
        random key, kept across this call's retries; give your own (an
        order id…) to make repeats of your operation create one job.
        ``options``: ``max_attempts``, ``timeout_seconds``, ``labels``."""
        spec = {"type": type, "run_at": run_at, "target": target, "payload": payload, **options}
        return await self.send(calls.create_job(spec, idempotency_key))

    async def create_jobs(
        self, jobs: Sequence[calls.JobSpec | Mapping[str, Any]]
    ) -> list[BatchItem]:
        """Up to 1,000 jobs in one request, each with its own result (a
        failed one carries its exception in ``error``)."""
        return await self.send(calls.create_jobs(jobs))

    async def get_job(self, job_id: str) -> Job:
        return await self.send(calls.job("GET", job_id))

    async def reschedule_job(self, job_id: str, run_at: datetime | str) -> Job:
        """Move a SCHEDULED job's ``runAt`` (PATCH); Conflict once it started."""
        return await self.send(
            calls.job("PATCH", job_id, body=calls.api_fields({"run_at": run_at}))
        )

    patch_job = reschedule_job

    async def cancel_job(self, job_id: str) -> Job:
        """Cancel a job that has not started; Conflict once it has."""
        return await self.send(calls.job("DELETE", job_id))

    async def retry_job(self, job_id: str) -> Job:
        """Run a FAILED or CANCELLED job again (same id and scheduledFor)."""
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
        """Every matching job, newest first, fetched a page at a time as the
        iteration goes (the API's cursor followed to the end)."""
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
        """Define a cron job (the same name and definition again returns
        it; another definition under the name is a Conflict: update it).
        ``options`` by their Python names: ``payload``, ``misfire_policy``,
        ``concurrency``, ``jitter_seconds``, ``max_attempts``, ``start_at``…"""
        fields = {"name": name, "schedule": schedule, "time_zone": time_zone, "target": target}
        return await self.send(calls.create_cron({**fields, **options}))

    async def get_cron(self, cron_id: str) -> Cron:
        return await self.send(calls.cron("GET", cron_id))

    async def update_cron(self, cron_id: str, **fields: Any) -> Cron:
        """Change the fields given; the others are kept."""
        return await self.send(calls.cron("PATCH", cron_id, body=calls.api_fields(fields)))

    async def delete_cron(self, cron_id: str) -> None:
        await self.send(calls.delete_cron(cron_id))

    async def list_crons(self) -> AsyncIterator[Cron]:
        """Every cron job of the owner, by name, a page at a time."""
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
        """One extra occurrence now."""
        return await self.send(calls.trigger(cron_id))

    async def preview_cron(
        self, cron_id: str, *, start: datetime | str | None = None, count: int = 10
    ) -> Preview:
        """The next ``count`` fire instants after ``start`` (default now)."""
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
        """Occurrences for the slots in ``[start, end)``, due now; slots that
        have one are reported, not doubled. Follows ``nextFrom`` to the end
        of the range (the API makes at most 1,000 slots a call)."""
        result: BackfillResult | None = None
        while True:
            page = await self.send(
                calls.backfill(cron_id, start, end, overlap=overlap, rerun=rerun, dry_run=dry_run)
            )
            result = page if result is None else result.merged(page)
            if page.next_from is None:
                return result
            start = page.next_from

    # -- calendars -------------------------------------------------------------

    async def create_calendar(
        self,
        name: str,
        *,
        time_zone: str,
        exclude_dates: Sequence[date | str] = (),
        include_dates: Sequence[date | str] = (),
        business_week: Sequence[str] | None = None,
        description: str | None = None,
    ) -> Calendar:
        """Define a calendar (the same days again return it; other days
        under the name are a Conflict: replace it). ``business_week``:
        ``["MON", …]``, default Monday to Friday."""
        body = calls.calendar_body(
            time_zone, exclude_dates, include_dates, business_week, description
        )
        return await self.send(calls.calendar("POST", name, body))

    async def get_calendar(self, name: str) -> Calendar:
        return await self.send(calls.calendar("GET", name))

    async def replace_calendar(
        self,
        name: str,
        *,
        time_zone: str,
        exclude_dates: Sequence[date | str] = (),
        include_dates: Sequence[date | str] = (),
        business_week: Sequence[str] | None = None,
        description: str | None = None,
    ) -> Calendar:
        """New days for the calendar: a new version; the occurrences its
        crons made already are planned again by it."""
        body = calls.calendar_body(
            time_zone, exclude_dates, include_dates, business_week, description
        )
        return await self.send(calls.calendar("PUT", name, body))

    async def delete_calendar(self, name: str) -> None:
        """Refused (Conflict) while cron jobs follow it."""
        await self.send(calls.delete_calendar(name))

    async def list_calendars(self) -> AsyncIterator[Calendar]:
        """Every calendar of the owner, by name, a page at a time."""
        after = ""
        while True:
            page, cursor = await self.send(calls.calendars_page(after))
            for calendar in page:
                yield calendar
            if not cursor:
                return
            after = cursor

    # -- limits (operator tokens) ---------------------------------------------

    async def list_limits(self) -> list[Limit]:
        """The limits in force, each for the whole cluster."""
        return await self.send(calls.limits("GET"))

    async def set_limit(
        self,
        key: str,
        *,
        concurrency: int | None = None,
        rate: float | None = None,
        burst: float | None = None,
    ) -> list[Limit]:
        """Set ``key``'s limit (an HTTP host, ``kafka:<topic>``) at run time,
        on every shard; answers the limits in force."""
        body = {"concurrency": concurrency, "rate": rate, "burst": burst}
        return await self.send(calls.limits("PUT", key, body))

    async def unset_limit(self, key: str) -> list[Limit]:
        """Drop ``key``'s run-time limit: the configured one, if any, applies again."""
        return await self.send(calls.limits("DELETE", key))

    async def apply_crons(
        self,
        definitions: Sequence[Mapping[str, Any]],
        *,
        owns: str | None = None,
        prune: bool = False,
        dry_run: bool = False,
    ) -> list[CronChange]:
        """Make the server's cron jobs match ``definitions`` (each the
        keywords of :meth:`create_cron`): create, update and, with ``prune``,
        delete those named with the ``owns`` prefix that are no longer
        defined. Returns the changes (with ``dry_run``, makes none)."""
        changes = plan_changes(definitions, [c async for c in self.list_crons()], owns, prune)
        for change in [] if dry_run else changes:
            if change.action == "create":
                await self.send(calls.create_cron(change.fields))
            elif change.action == "update" and change.cron_job_id:
                await self.send(calls.cron("PATCH", change.cron_job_id, body=change.fields))
            elif change.action == "delete" and change.cron_job_id:
                await self.send(calls.delete_cron(change.cron_job_id))
        return changes
