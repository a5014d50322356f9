"""Crons as code: a declarative file of cron definitions, checked offline
and compared with what the server has.

The file (YAML or JSON)::

    owns: billing.            # the name prefix this file owns
    crons:
      - name: billing.settlement
        schedule: "0 2 * * *"
        timeZone: Europe/Istanbul
        target: {kind: HTTP, url: https://billing.internal/settle}

**Ownership.** A token's crons belong to its owner service; within it, a
file owns the crons whose names start with ``owns``. Every cron of the file
must carry that prefix, and ``apply --prune`` deletes the owner's crons with
the prefix that the file no longer lists, never any other. Two teams that
share an owner keep to their own prefixes.

Each cron is validated by the server's own document model
(:class:`~cluster.services.cron_document.CreateCronIn`: unknown fields
refused, ``timeZone`` required) and its schedule read by the server's own
builder (:mod:`cluster.cron.definition`), so what lints clean is what the
server accepts, short of the operator's target allow list and minimum
interval.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cluster.cron.definition import check_calendar_terms, first_slot, parse_terms
from cluster.cron.firing import Fire
from cluster.cron.schedule import InvalidSchedule
from cluster.errors import VakitError
from cluster.services.cron_document import (
    DOCUMENT_FIELDS,
    CreateCronIn,
    definition_of,
    document_of,
    instant,
)

__all__ = [
    "COMPARED",
    "Change",
    "CronFile",
    "FileError",
    "LintResult",
    "desired_fields",
    "lint",
    "load",
    "plan_changes",
]

# The fields a file sets and apply keeps in step, by their API names: all
# of a definition's but its name, which finds it.
COMPARED = tuple(name for name in DOCUMENT_FIELDS.values() if name != "name")
_INSTANTS = ("startAt", "endAt")


class FileError(Exception):
    """The file cannot be read as a cron file at all (not YAML, wrong shape)."""


@dataclass(frozen=True)
class CronFile:
    path: str
    owns: str | None
    items: list[Any]  # as written; validated by lint / desired_fields


@dataclass
class LintResult:
    name: str
    errors: list[str] = field(default_factory=list)
    fires: list[Fire] = field(default_factory=list)
    notes_ahead: list[Fire] = field(default_factory=list)  # DST and month-end, the year ahead
    notes: list[str] = field(default_factory=list)
    spec: CreateCronIn | None = None


@dataclass(frozen=True)
class Change:
    """One step of ``apply``: ``create``, ``update``, ``delete`` or ``unchanged``."""

    action: str
    name: str
    cron_job_id: str | None = None
    body: dict[str, Any] | None = None  # the create or PATCH body
    diff: tuple[tuple[str, Any, Any], ...] = ()  # (field, server's, file's)


def load(path: str | Path) -> CronFile:
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FileError(f"{path}: not YAML or JSON: {exc}") from None
    if isinstance(data, list):
        data = {"crons": data}
    if not isinstance(data, dict):
        raise FileError(f"{path}: expected a mapping with 'crons' (and 'owns')")
    unknown = sorted(set(data) - {"owns", "crons"})
    if unknown:
        raise FileError(f"{path}: unknown top-level keys {unknown}; expected 'owns' and 'crons'")
    owns = data.get("owns")
    if owns is not None and (not isinstance(owns, str) or not owns):
        raise FileError(f"{path}: 'owns' must be a non-empty name prefix")
    items = data.get("crons") or []
    if not isinstance(items, list):
        raise FileError(f"{path}: 'crons' must be a list")
    return CronFile(str(path), owns, items)


def _label(item: Any, index: int) -> str:
    name = item.get("name") if isinstance(item, dict) else None
    return name if isinstance(name, str) and name else f"crons[{index}]"


def _validate(item: Any) -> tuple[CreateCronIn | None, list[str]]:
    try:
        return CreateCronIn.model_validate(item), []
    except ValidationError as exc:
        return None, [
            f"{'.'.join(str(p) for p in e['loc']) or 'cron'}: {e['msg']}" for e in exc.errors()
        ]


def lint(
    cron_file: CronFile,
    now: datetime,
    *,
    count: int = 5,
    scan_days: int = 366,
    scan_cap: int = 50_000,
) -> list[LintResult]:
    """Each cron checked as the server would, with its next ``count`` fires
    and the DST and month-end notes of the ``scan_days`` ahead."""
    results: list[LintResult] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(cron_file.items):
        result = LintResult(_label(item, index))
        results.append(result)
        spec, errors = _validate(item)
        result.errors += errors
        if spec is None:
            continue
        result.spec = spec
        if spec.name in seen:
            result.errors.append(f"name: {spec.name!r} appears twice (crons[{seen[spec.name]}])")
        seen.setdefault(spec.name, index)
        if cron_file.owns is not None and not spec.name.startswith(cron_file.owns):
            result.errors.append(
                f"name: {spec.name!r} does not start with {cron_file.owns!r}, the prefix this file owns"
            )
        definition = definition_of(spec)
        try:
            check_calendar_terms(definition)
        except VakitError as exc:
            result.errors.append(f"calendarPolicy: {exc}")
        try:
            # The name stands for the id the server will draw (H fields' seed).
            schedule = parse_terms(definition, seed=spec.name)
        except (InvalidSchedule, VakitError) as exc:
            result.errors.append(f"schedule: {exc}")
            continue
        if "h" in spec.schedule.lower() and not spec.schedule.strip().lower().startswith("every"):
            result.notes.append(
                "H fields: the server picks their values from the cron's id; these fires are an example"
            )
        end = definition.end_at
        first = first_slot(schedule, now, definition.start_at, end)
        if first is None:
            result.errors.append("the schedule has no slot between now (or startAt) and endAt")
            continue
        limit = count if spec.maxRuns is None else min(count, spec.maxRuns)
        result.fires = list(
            schedule.fires(first - timedelta(microseconds=1), count=limit, until=end)
        )
        horizon = now + timedelta(days=scan_days)
        if end is not None:
            horizon = min(horizon, end)
        for n, fire in enumerate(schedule.fires(first - timedelta(microseconds=1), until=horizon)):
            if n >= scan_cap:
                result.notes.append(f"DST notes: only the next {scan_cap} fires were scanned")
                break
            if fire.note is not None:
                result.notes_ahead.append(fire)
    return results


def desired_fields(spec: CreateCronIn) -> dict[str, Any]:
    """What the server will hold for ``spec``, by API field name: defaults
    filled in as the API fills them, so a field left out of the file is put
    back to its default by ``apply``."""
    values = document_of(definition_of(spec))
    # Instants as the file spells them (compared as instants, shown as written).
    values["startAt"], values["endAt"] = spec.startAt, spec.endAt
    return {k: values[k] for k in COMPARED}


def _same(key: str, have: Any, want: Any) -> bool:
    if key in _INSTANTS:
        if have is None or want is None:
            return have is None and want is None
        return instant(str(have)) == instant(str(want))
    return json.dumps(have, sort_keys=True) == json.dumps(want, sort_keys=True)


def plan_changes(
    specs: list[CreateCronIn], server: list[dict[str, Any]], owns: str | None, prune: bool
) -> tuple[list[Change], list[str]]:
    """The changes that make the server match ``specs``, and the names the
    file owns that the server has but the file does not (deleted when
    ``prune``, listed otherwise)."""
    by_name = {c["name"]: c for c in server}
    changes: list[Change] = []
    for spec in specs:
        want = desired_fields(spec)
        have = by_name.get(spec.name)
        if have is None:
            body = spec.model_dump(exclude_none=True)
            body["target"] = want["target"]
            if spec.payload is None and "payload" in spec.model_fields_set:
                body["payload"] = None
            changes.append(Change("create", spec.name, body=body))
            continue
        diff = tuple(
            (k, have.get(k), want[k]) for k in COMPARED if not _same(k, have.get(k), want[k])
        )
        if diff:
            changes.append(
                Change("update", spec.name, have["cronJobId"], {k: w for k, _, w in diff}, diff)
            )
        else:
            changes.append(Change("unchanged", spec.name, have["cronJobId"]))
    wanted = {s.name for s in specs}
    extra = sorted(
        name
        for name in by_name
        if owns is not None and name.startswith(owns) and name not in wanted
    )
    if prune:
        changes += [Change("delete", name, by_name[name]["cronJobId"]) for name in extra]
    return changes, extra
