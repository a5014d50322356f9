"""Each API operation as a :class:`~vakit_client.retrying.Call`: its method,
path, query, body, key and how its answer is read. The sync and async
clients send the same calls, so an operation is written once, here."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any, TypedDict
from urllib.parse import quote

import httpx

from vakit_client.errors import PartialResults, problem_error
from vakit_client.models import (
    BackfillResult,
    BatchItem,
    Calendar,
    CreatedJob,
    Cron,
    Job,
    Limit,
    Preview,
    Triggered,
    format_instant,
    parse_instant,
)
from vakit_client.retrying import Call

__all__ = [
    "JobSpec",
    "JobsPage",
    "api_fields",
    "backfill",
    "calendar",
    "calendar_body",
    "calendars_page",
    "create_cron",
    "create_job",
    "create_jobs",
    "cron",
    "crons_page",
    "delete_calendar",
    "delete_cron",
    "job",
    "jobs_page",
    "limits",
    "new_key",
]

API = "/api/v1"


class JobSpec(TypedDict, total=False):
    """One job of :meth:`Client.create_jobs`: the keywords of ``create_job``."""

    type: str
    run_at: datetime | str
    target: Mapping[str, Any]
    payload: Any
    max_attempts: int
    timeout_seconds: int
    labels: Mapping[str, str]
    idempotency_key: str


def new_key() -> str:
    """An Idempotency-Key for one logical create: random, so two creates
    never share one; kept for that create's retries."""
    return str(uuid.uuid4())


def _segment(value: str) -> str:
    return quote(value, safe="")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def api_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments as the API's fields: ``time_zone`` is ``timeZone``,
    a datetime an RFC 3339 instant (a naive one is refused)."""
    out: dict[str, Any] = {}
    for name, value in fields.items():
        key = _camel(name)
        out[key] = format_instant(value, name) if isinstance(value, datetime) else value
    return out


def _json(response: httpx.Response) -> Any:
    return response.json()


def _job(response: httpx.Response) -> Job:
    return Job.from_json(response.json())


def _cron(response: httpx.Response) -> Cron:
    return Cron.from_json(response.json())


def _nothing(response: httpx.Response) -> None:
    return None


def _job_body(spec: Mapping[str, Any]) -> dict[str, Any]:
    fields = {k: v for k, v in spec.items() if k != "idempotency_key"}
    if "run_at" not in fields or "type" not in fields or "target" not in fields:
        raise TypeError("a job needs type, run_at and target")
    return api_fields(fields)


def create_job(spec: Mapping[str, Any], key: str | None) -> Call[CreatedJob]:
    key = key or new_key()

    def parse(response: httpx.Response) -> CreatedJob:
        doc = response.json()
        return CreatedJob(doc["jobId"], doc["status"], key, replayed=response.status_code == 200)

    return Call("POST", f"{API}/jobs", parse, json=_job_body(spec), idempotency_key=key)


def create_jobs(specs: Sequence[Mapping[str, Any]]) -> Call[list[BatchItem]]:
    # Every job gets a key, so the whole batch is safe to send again: a
    # repeat answers each created job with the first one (200).
    keys = [spec.get("idempotency_key") or new_key() for spec in specs]
    body = {
        "jobs": [
            {**_job_body(spec), "idempotencyKey": k} for spec, k in zip(specs, keys, strict=True)
        ]
    }

    def parse(response: httpx.Response) -> list[BatchItem]:
        items = []
        for result in response.json()["results"]:
            index, status = result["index"], result["status"]
            problem = result.get("problem")
            items.append(
                BatchItem(
                    index,
                    status,
                    keys[index],
                    job_id=result.get("jobId"),
                    job_status=result.get("jobStatus"),
                    error=problem_error(status, problem) if problem is not None else None,
                )
            )
        return items

    return Call("POST", f"{API}/jobs:batch", parse, json=body, repeatable=True)


def job(method: str, job_id: str, action: str = "", body: Any = None) -> Call[Job]:
    """GET, PATCH or DELETE of a job, or one of its actions (``retry``…)."""
    path = f"{API}/jobs/{_segment(job_id)}" + (f"/{action}" if action else "")
    # Reading, moving to an instant and cancelling give the same result twice;
    # an action (retry, pause) is refused the second time (409), not doubled.
    return Call(method, path, _job, json=body, repeatable=not action)


class JobsPage:
    def __init__(self, jobs: list[Job], next_cursor: str | None) -> None:
        self.jobs, self.next_cursor = jobs, next_cursor


def jobs_page(
    query: Sequence[tuple[str, str]], cursor: str | None, allow_partial: bool
) -> Call[JobsPage]:
    params = [*query, *([("cursor", cursor)] if cursor else [])]

    def parse(response: httpx.Response) -> JobsPage:
        doc = response.json()
        if doc.get("missingShards") and not allow_partial:
            raise PartialResults(doc["missingShards"])
        return JobsPage([Job.from_json(j) for j in doc["items"]], doc.get("nextCursor"))

    return Call("GET", f"{API}/jobs", parse, params=params, repeatable=True)


def search_query(
    *,
    status: str | Sequence[str] | None,
    type: str | None,
    cron_job_id: str | None,
    run_at_from: datetime | str | None,
    run_at_to: datetime | str | None,
    finished_from: datetime | str | None,
    finished_to: datetime | str | None,
    labels: Mapping[str, str] | None,
    page_size: int,
    attempts: bool,
) -> list[tuple[str, str]]:
    query: list[tuple[str, str]] = [("limit", str(page_size))]
    statuses = [status] if isinstance(status, str) else list(status or [])
    query += [("status", s) for s in statuses]
    if type is not None:
        query.append(("type", type))
    if cron_job_id is not None:
        query.append(("cronJobId", cron_job_id))
    for name, value in (
        ("runAtFrom", run_at_from), ("runAtTo", run_at_to),
        ("finishedFrom", finished_from), ("finishedTo", finished_to),
    ):  # fmt: skip
        if value is not None:
            query.append((name, format_instant(value, name)))
    query += [("label", f"{k}={v}") for k, v in (labels or {}).items()]
    if attempts:
        query.append(("attempts", "true"))
    return query


# -- cron jobs ----------------------------------------------------------------


def create_cron(fields: Mapping[str, Any]) -> Call[Cron]:
    # A cron's name is its key: the same definition again answers 200 with
    # the first, so the create is safe to send twice.
    return Call("POST", f"{API}/cron-jobs", _cron, json=api_fields(fields), repeatable=True)


def cron(method: str, cron_id: str, action: str = "", body: Any = None) -> Call[Cron]:
    path = f"{API}/cron-jobs/{_segment(cron_id)}" + (f"/{action}" if action else "")
    # GET, PATCH (to given values), pause and resume end in the same state twice.
    return Call(method, path, _cron, json=body, repeatable=True)


def delete_cron(cron_id: str) -> Call[None]:
    return Call("DELETE", f"{API}/cron-jobs/{_segment(cron_id)}", _nothing, repeatable=True)


def crons_page(after: str) -> Call[tuple[list[Cron], str | None]]:
    def parse(response: httpx.Response) -> tuple[list[Cron], str | None]:
        doc = response.json()
        return [Cron.from_json(c) for c in doc["items"]], doc.get("nextCursor")

    params = [("limit", "500"), *([("after", after)] if after else [])]
    return Call("GET", f"{API}/cron-jobs", parse, params=params, repeatable=True)


def trigger(cron_id: str) -> Call[Triggered]:
    def parse(response: httpx.Response) -> Triggered:
        doc = response.json()
        when = parse_instant(doc["scheduledFor"])
        assert when is not None
        return Triggered(doc["jobId"], when)

    # Not repeatable: each trigger is one more occurrence.
    return Call("POST", f"{API}/cron-jobs/{_segment(cron_id)}/trigger", parse)


def preview(cron_id: str, start: datetime | str | None, count: int) -> Call[Preview]:
    params = [("count", str(count))]
    if start is not None:
        params.append(("from", format_instant(start, "start")))
    path = f"{API}/cron-jobs/{_segment(cron_id)}/preview"
    return Call("GET", path, lambda r: Preview.from_json(r.json()), params=params, repeatable=True)


def backfill(
    cron_id: str,
    start: datetime | str,
    end: datetime | str,
    *,
    overlap: str,
    rerun: bool,
    dry_run: bool,
) -> Call[BackfillResult]:
    body = {
        "from": format_instant(start, "start"),
        "to": format_instant(end, "end"),
        "overlap": overlap,
        "rerun": rerun,
        "dryRun": dry_run,
    }
    path = f"{API}/cron-jobs/{_segment(cron_id)}/backfill"
    # A slot that has an occurrence is reported, not doubled: safe twice
    # (with rerun, a second call would run finished slots again: not).
    return Call(
        "POST", path, lambda r: BackfillResult.from_json(r.json()), json=body, repeatable=not rerun
    )


# -- calendars -----------------------------------------------------------------


def _calendar(response: httpx.Response) -> Calendar:
    return Calendar.from_json(response.json())


def calendar_body(
    time_zone: str,
    exclude_dates: Sequence[date | str],
    include_dates: Sequence[date | str],
    business_week: Sequence[str] | None,
    description: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "timeZone": time_zone,
        "excludeDates": [d if isinstance(d, str) else d.isoformat() for d in exclude_dates],
        "includeDates": [d if isinstance(d, str) else d.isoformat() for d in include_dates],
    }
    if business_week is not None:
        body["businessWeek"] = list(business_week)
    if description is not None:
        body["description"] = description
    return body


def calendar(method: str, name: str, body: Any = None) -> Call[Calendar]:
    """POST (``name`` in the body: the same days again answer 200), GET, PUT
    (the same days again change nothing): each safe to send twice."""
    path = f"{API}/calendars" if method == "POST" else f"{API}/calendars/{_segment(name)}"
    if method == "POST":
        body = {"name": name, **body}
    return Call(method, path, _calendar, json=body, repeatable=True)


def delete_calendar(name: str) -> Call[None]:
    return Call("DELETE", f"{API}/calendars/{_segment(name)}", _nothing, repeatable=True)


def calendars_page(after: str) -> Call[tuple[list[Calendar], str | None]]:
    def parse(response: httpx.Response) -> tuple[list[Calendar], str | None]:
        doc = response.json()
        return [Calendar.from_json(c) for c in doc["items"]], doc.get("nextCursor")

    params = [("limit", "500"), *([("after", after)] if after else [])]
    return Call("GET", f"{API}/calendars", parse, params=params, repeatable=True)


# -- limits (operator tokens) ------------------------------------------------------


def limits(method: str, key: str = "", body: Any = None) -> Call[list[Limit]]:
    """GET every limit, PUT or DELETE one key's run-time limit: each answers
    the limits in force, and each is safe to send twice."""

    def parse(response: httpx.Response) -> list[Limit]:
        return [Limit.from_json(item) for item in response.json()["limits"]]

    path = f"{API}/limits" + (f"/{_segment(key)}" if key else "")
    return Call(method, path, parse, json=body, repeatable=True)
