"""Crons as code without a server: reading the file, what apply would
change, and the offline lint."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cluster.cli_client.cronfile import FileError, desired_fields, lint, load, plan_changes
from cluster.services.cron_document import CreateCronIn

NOW = datetime(2027, 3, 1, 12, tzinfo=UTC)


def spec(**over: Any) -> CreateCronIn:
    body: dict[str, Any] = {
        "name": "billing.settle",
        "schedule": "0 2 * * *",
        "timeZone": "Europe/Istanbul",
        "target": {"kind": "HTTP", "url": "https://hooks.example.com/settle"},
    }
    body.update(over)
    return CreateCronIn.model_validate(body)


def server_copy(s: CreateCronIn, **over: Any) -> dict[str, Any]:
    """What GET /cron-jobs would show for ``s`` (its compared fields)."""
    return {"cronJobId": "cron_x", "name": s.name, **desired_fields(s), **over}


def test_defaults_are_filled_as_the_api_fills_them() -> None:
    fields = desired_fields(spec())
    assert fields["type"] == "billing.settle"  # the API's default: the name
    assert (fields["misfirePolicy"], fields["concurrency"], fields["jitterSeconds"]) == ("RUN_ONCE", "ALLOW", 0)
    assert (fields["monthEndPolicy"], fields["dstPolicy"], fields["maxRuns"]) == ("SKIP", "CRONIE", None)
    assert fields["target"] == {"kind": "HTTP", "url": "https://hooks.example.com/settle"}


def test_same_definition_is_unchanged_whatever_the_instant_spelling() -> None:
    s = spec(startAt="2031-05-01T10:07:00+02:00")
    changes, _ = plan_changes([s], [server_copy(s, startAt="2031-05-01T08:07:00Z")], "billing.", False)
    assert [c.action for c in changes] == ["unchanged"]


def test_a_field_left_out_of_the_file_goes_back_to_its_default() -> None:
    s = spec()
    changes, _ = plan_changes([s], [server_copy(s, jitterSeconds=300, schedule="0 3 * * *")], None, False)
    [update] = changes
    assert update.action == "update" and update.cron_job_id == "cron_x"
    assert update.body == {"schedule": "0 2 * * *", "jitterSeconds": 0}
    assert [(k, h, w) for k, h, w in update.diff] == [("schedule", "0 3 * * *", "0 2 * * *"), ("jitterSeconds", 300, 0)]


def test_prune_deletes_only_the_prefix_the_file_owns() -> None:
    s = spec()
    server = [
        server_copy(s),
        {"cronJobId": "cron_old", "name": "billing.old"},
        {"cronJobId": "cron_theirs", "name": "payments.nightly"},
    ]
    kept, extra = plan_changes([s], server, "billing.", prune=False)
    assert [c.action for c in kept] == ["unchanged"] and extra == ["billing.old"]
    pruned, _ = plan_changes([s], server, "billing.", prune=True)
    assert [(c.action, c.name) for c in pruned] == [("unchanged", "billing.settle"), ("delete", "billing.old")]
    # A new cron is created with the body as written.
    created, _ = plan_changes([spec(name="billing.new")], [], "billing.", prune=True)
    assert created[0].action == "create" and created[0].body is not None
    assert created[0].body["timeZone"] == "Europe/Istanbul"


def test_load_refuses_what_is_not_a_crons_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    for text, message in [
        ("owns: a.\ncron: []\n", "unknown top-level keys"),
        ("- 1\n- [\n", "not YAML"),
        ("owns: ''\ncrons: []\n", "non-empty name prefix"),
        ("crons: {a: 1}\n", "must be a list"),
    ]:
        path.write_text(text)
        with pytest.raises(FileError, match=message):
            load(path)


def test_lint_flags_each_problem_and_shows_fires(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "owns: billing.\ncrons:\n"
        "  - {name: billing.a, schedule: 'H 2 * * *', timeZone: UTC, target: {kind: NOOP}}\n"
        "  - {name: billing.a, schedule: '0 2 * * *', timeZone: UTC, target: {kind: NOOP}}\n"
        "  - {name: billing.b, schedule: '0 2 * * *', timeZone: Mars/Base, target: {kind: NOOP}}\n"
        "  - {name: billing.c, schedule: '@daily', timeZone: UTC, target: {kind: NOOP}, endAt: '2020-01-01T00:00:00Z'}\n"
        "  - {name: billing.d, schedule: '@daily', timeZone: UTC, target: {kind: NOOP}, colour: red}\n"
    )
    a, dup, zone, ended, unknown = lint(load(path), NOW, count=2)
    assert not a.errors and len(a.fires) == 2 and any("H fields" in n for n in a.notes)
    assert any("appears twice" in e for e in dup.errors)
    assert any("unknown time zone" in e for e in zone.errors)
    assert any("no slot between now" in e for e in ended.errors)
    assert any(e.startswith("colour:") for e in unknown.errors)


def test_lint_knows_the_day_forms_and_calendars_offline(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "owns: billing.\ncrons:\n"
        "  - {name: billing.a, schedule: '0 9 LW * *', timeZone: Europe/Istanbul, target: {kind: NOOP}}\n"
        "  - {name: billing.b, schedule: '0 9 * * MON#3', timeZone: UTC, target: {kind: NOOP},"
        " calendar: tr, calendarPolicy: NEXT_BUSINESS_DAY}\n"
        "  - {name: billing.c, schedule: '0 9 * * MON#6', timeZone: UTC, target: {kind: NOOP}}\n"
        "  - {name: billing.d, schedule: '0 9 2BD * *', timeZone: UTC, target: {kind: NOOP},"
        " calendarPolicy: SKIP}\n"
        "  - {name: billing.e, schedule: '0 9 L-3 * *', timeZone: UTC, target: {kind: NOOP},"
        " calendar: tr, calendarPolicy: SOMETIMES}\n"
    )
    lw, third, sixth, lone, policy = lint(load(path), NOW, count=2)
    assert not lw.errors and [f.local.day for f in lw.fires] == [31, 30]  # Wed 31 Mar, Fri 30 Apr
    assert not third.errors and third.spec is not None and third.spec.calendar == "tr"
    assert [f.local.day for f in third.fires] == [15, 19]  # the third Mondays of Mar, Apr 2027
    assert any("occurs 1 to 5 times" in e for e in sixth.errors)
    assert any("calendarPolicy needs a calendar" in e for e in lone.errors)
    assert any(e.startswith("calendarPolicy") for e in policy.errors)
