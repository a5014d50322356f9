"""The ``vakit`` command line for people, run as a real process against a
real API process on real shards: output formats, exit codes (0 ok, 1
failed, 2 usage, 3 not found), crons as code (apply, lint)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.local.pgserver import PgServer
from tests.helpers import start_sink, wait_for
from tests.pgfixtures import clone_databases, drop_databases
from tests.procs import REPO, ProcessHarness, VakitProcess
from tests.procs import TOKEN as OPERATOR_TOKEN

pytestmark = pytest.mark.integration

VAKIT = str(Path(sys.executable).with_name("vakit"))
TOKEN, OTHER = "cli-token", "cli-other"


@pytest.fixture(scope="module")
def harness(pg_servers: list[PgServer], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessHarness]:
    """Processes on fresh shard databases, for the module."""
    dsns = clone_databases(pg_servers)
    procs = ProcessHarness(dsns, tmp_path_factory.mktemp("cli-logs"))
    procs.settings.update(
        api_tokens=f"{TOKEN}=team-a,{OTHER}=team-b", http_target_allow="hooks.example.com"
    )
    try:
        yield procs
    finally:
        procs.close()
        drop_databases(dsns)


@pytest.fixture(scope="module")
def api(harness: ProcessHarness) -> VakitProcess:
    return harness.api().wait_ready()


@pytest.fixture(scope="module")
def worker(harness: ProcessHarness) -> VakitProcess:
    return harness.worker("cli-w1").wait_ready()


def vakit(*args: str, api: VakitProcess | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``vakit args…`` as a user runs it; with ``api``, its URL and token
    come from VAKIT_API_URL and VAKIT_TOKEN."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("VAKIT_")}
    if api is not None:
        base["VAKIT_API_URL"] = api.base_url
        base["VAKIT_TOKEN"] = TOKEN
    base.update(env or {})
    return subprocess.run(
        [VAKIT, *args], cwd=REPO, env=base, capture_output=True, text=True, timeout=60, check=False
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(result))


def test_create_get_preview_trigger_runs_delete(api: VakitProcess) -> None:
    out = ok(
        vakit(
            "crons", "create", "--name", "report", "--schedule", "0 2 31 * *",
            "--time-zone", "Europe/Istanbul", "--url", "https://hooks.example.com/run",
            "--month-end-policy", "CLAMP", "--max-runs", "12", api=api,
        )
    )  # fmt: skip
    assert "report" in out and "CRON_JOB_ID" in out  # a table by default
    cron = as_json(vakit("crons", "get", "report", "-o", "json", api=api))
    assert cron["name"] == "report" and cron["monthEndPolicy"] == "CLAMP" and cron["maxRuns"] == 12
    # By id as well as by name, and in YAML.
    again = yaml.safe_load(ok(vakit("crons", "get", cron["cronJobId"], "-o", "yaml", api=api)))
    assert again["cronJobId"] == cron["cronJobId"]
    listed = as_json(vakit("crons", "list", "-o", "json", api=api))
    assert [c["name"] for c in listed["items"]] == ["report"]

    preview = as_json(
        vakit("crons", "preview", "report", "--from", "2031-01-15T00:00:00Z", "--count", "3", "-o", "json", api=api)
    )
    assert [f["local"][:10] for f in preview["fires"]] == ["2031-01-31", "2031-02-28", "2031-03-31"]
    assert "February 2031 has no 31st" in preview["fires"][1]["note"]
    table = ok(vakit("crons", "preview", "report", "--from", "2031-01-15T00:00:00Z", "--count", "3", api=api))
    assert "SCHEDULED_FOR" in table and "monthEndPolicy CLAMP" in table

    fired = as_json(vakit("crons", "trigger", "report", "-o", "json", api=api))
    job = as_json(vakit("jobs", "get", fired["jobId"], "-o", "json", api=api))
    assert job["jobId"] == fired["jobId"] and job["status"] == "SCHEDULED"
    runs = as_json(vakit("crons", "runs", "report", "-o", "json", api=api))
    assert [r["jobId"] for r in runs["runs"]] == [fired["jobId"]]
    # No worker runs here: the job is still cancellable, once.
    ok(vakit("jobs", "cancel", fired["jobId"], api=api))
    assert as_json(vakit("jobs", "get", fired["jobId"], "-o", "json", api=api))["status"] == "CANCELLED"
    assert vakit("jobs", "cancel", fired["jobId"], api=api).returncode == 1  # 409: finished

    ok(vakit("crons", "delete", "report", api=api))
    assert vakit("crons", "get", cron["cronJobId"], api=api).returncode == 3


def test_exit_codes(api: VakitProcess, tmp_path: Path) -> None:
    # 2: usage. No API given; a missing option; an unknown command.
    nowhere = vakit("crons", "list")
    assert nowhere.returncode == 2 and "VAKIT_API_URL" in nowhere.stderr
    no_zone = vakit("crons", "create", "--name", "x", "--schedule", "0 2 * * *", "--url", "https://hooks.example.com/", api=api)
    assert no_zone.returncode == 2 and "--time-zone" in no_zone.stderr
    assert vakit("crons", "frobnicate", api=api).returncode == 2
    # 3: not found, by name and by id; another owner's cron is not found either.
    assert vakit("crons", "get", "no-such-cron", api=api).returncode == 3
    assert vakit("jobs", "get", "job_01JD0000000000000000000000", api=api).returncode == 3
    mine = as_json(
        vakit("crons", "create", "--name", "mine", "--schedule", "@daily", "--time-zone", "UTC",
              "--url", "https://hooks.example.com/", "-o", "json", api=api)
    )  # fmt: skip
    theirs = vakit("crons", "get", mine["cronJobId"], api=api, env={"VAKIT_TOKEN": OTHER})
    assert theirs.returncode == 3
    # An operator token acts for an owner with --owner; a tenant's may not (403: 1).
    as_operator = {"VAKIT_TOKEN": OPERATOR_TOKEN}
    seen = as_json(vakit("crons", "get", "mine", "--owner", "team-a", "-o", "json", api=api, env=as_operator))
    assert seen["cronJobId"] == mine["cronJobId"]
    assert vakit("crons", "list", "--owner", "team-a", api=api, env={"VAKIT_TOKEN": OTHER}).returncode == 1
    # 1: failed. The server refuses the body (timeZone missing in a file:
    # the 422 names it); a bad token; an API that is not there.
    body = tmp_path / "cron.yaml"
    body.write_text("name: zoneless\nschedule: '0 2 * * *'\ntarget: {kind: HTTP, url: 'https://hooks.example.com/'}\n")
    refused = vakit("crons", "create", "-f", str(body), api=api)
    assert refused.returncode == 1 and "timeZone" in refused.stderr
    assert vakit("crons", "list", api=api, env={"VAKIT_TOKEN": "wrong"}).returncode == 1
    # The URL `vakit up` prints ends in /api/v1: taken as it is.
    ok(vakit("crons", "list", "--api-url", api.base_url + "/api/v1", "--token", TOKEN))
    gone = vakit("crons", "list", "--api-url", "http://127.0.0.1:9", "--token", TOKEN)
    assert gone.returncode == 1 and "cannot reach" in gone.stderr
    ok(vakit("crons", "delete", "mine", api=api))


CRONS_FILE = """\
owns: billing.
crons:
  - name: billing.settlement
    schedule: "0 2 * * *"
    timeZone: Europe/Istanbul
    target: {kind: HTTP, url: "https://hooks.example.com/settle"}
    payload: {report: settlement}
  - name: billing.invoices
    schedule: "0 3 31 * *"
    timeZone: Europe/Istanbul
    monthEndPolicy: CLAMP
    target: {kind: HTTP, url: "https://hooks.example.com/invoices"}
"""


def test_apply_creates_updates_and_prunes_only_what_the_file_owns(api: VakitProcess, tmp_path: Path) -> None:
    outsider = as_json(
        vakit("crons", "create", "--name", "other.team", "--schedule", "@hourly", "--time-zone", "UTC",
              "--url", "https://hooks.example.com/", "-o", "json", api=api)
    )  # fmt: skip
    path = tmp_path / "crons.yaml"
    path.write_text(CRONS_FILE)

    dry = ok(vakit("crons", "apply", "-f", str(path), "--dry-run", api=api))
    assert "+ create    billing.settlement" in dry and "2 to create" in dry
    names = {c["name"] for c in as_json(vakit("crons", "list", "-o", "json", api=api))["items"]}
    assert names == {"other.team"}  # a dry run changes nothing

    ok(vakit("crons", "apply", "-f", str(path), api=api))
    settlement = as_json(vakit("crons", "get", "billing.settlement", "-o", "json", api=api))
    assert settlement["payload"] == {"report": "settlement"}
    same = ok(vakit("crons", "apply", "-f", str(path), api=api))
    assert "0 to create, 0 to update, 0 to delete, 2 unchanged" in same

    # A changed schedule under the same name is an update (a create would
    # be a 409), and the cron keeps its id. The invoices cron leaves the
    # file: kept without --prune, deleted with it; other.team is never touched.
    path.write_text(
        CRONS_FILE.replace('"0 2 * * *"', '"30 1 * * *"').split("  - name: billing.invoices")[0]
    )
    plan = as_json(vakit("crons", "apply", "-f", str(path), "--dry-run", "-o", "json", api=api))
    [update] = [c for c in plan["changes"] if c["action"] == "update"]
    assert update["diff"] == [{"field": "schedule", "server": "0 2 * * *", "file": "30 1 * * *"}]
    assert plan["notInFile"] == ["billing.invoices"]
    ok(vakit("crons", "apply", "-f", str(path), api=api))
    after = as_json(vakit("crons", "get", "billing.settlement", "-o", "json", api=api))
    assert after["cronJobId"] == settlement["cronJobId"] and after["schedule"] == "30 1 * * *"
    assert vakit("crons", "get", "billing.invoices", api=api).returncode == 0
    pruned = ok(vakit("crons", "apply", "-f", str(path), "--prune", api=api))
    assert "- delete    billing.invoices" in pruned
    names = {c["name"] for c in as_json(vakit("crons", "list", "-o", "json", api=api))["items"]}
    assert names == {"billing.settlement", "other.team"}
    assert outsider["cronJobId"] in {c["cronJobId"] for c in as_json(vakit("crons", "list", "-o", "json", api=api))["items"]}
    # --prune without an 'owns' prefix is refused: it would not know what is its own.
    unowned = tmp_path / "unowned.yaml"
    unowned.write_text("crons: []\n")
    assert vakit("crons", "apply", "-f", str(unowned), "--prune", api=api).returncode == 2


def test_lint_offline_fires_dst_notes_and_errors(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "owns: ops.\ncrons:\n"
        "  - name: ops.backup\n    schedule: '30 2 * * *'\n    timeZone: Europe/Berlin\n"
        "    dstPolicy: SKIP\n    target: {kind: NOOP}\n"
    )
    out = ok(vakit("crons", "lint", str(good)))  # no API: lint is offline
    assert "✓ ops.backup" in out and "dstPolicy SKIP" in out
    report = json.loads(ok(vakit("crons", "lint", str(good), "-o", "json")))
    [backup] = report
    assert backup["ok"] and len(backup["fires"]) == 5
    assert all(f["local"][11:16] == "02:30" for f in backup["fires"])
    # Berlin's autumn overlap is in every year ahead; under SKIP a 02:30 slot
    # fires only the first time there, and the preview says so.
    assert any("DST overlap" in n["note"] for n in backup["notesAhead"])

    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "owns: ops.\ncrons:\n"
        "  - name: ops.nozone\n    schedule: '0 2 * * *'\n    target: {kind: NOOP}\n"
        "  - name: ops.badexpr\n    schedule: '0 25 * * *'\n    timeZone: UTC\n    target: {kind: NOOP}\n"
        "  - name: elsewhere.x\n    schedule: '@daily'\n    timeZone: UTC\n    target: {kind: NOOP}\n"
    )
    result = vakit("crons", "lint", str(bad))
    assert result.returncode == 1
    assert "timeZone: Field required" in result.stdout
    assert "schedule:" in result.stdout and "does not start with 'ops.'" in result.stdout
    assert "3 of 3 cron(s) invalid" in result.stderr
    assert vakit("crons", "lint", str(tmp_path / "missing.yaml")).returncode == 2


def test_completion_script_and_completions() -> None:
    script = ok(vakit("completion", "bash"))
    assert "_VAKIT_COMPLETE=bash_complete" in script and "complete -o" in script
    # What the script asks for when a user presses Tab: commands, then choices.
    words = {"_VAKIT_COMPLETE": "bash_complete", "COMP_WORDS": "vakit crons ap", "COMP_CWORD": "2"}
    assert ok(vakit(env=words)).split() == ["plain,apply"]
    words.update(COMP_WORDS="vakit dlq list -o ", COMP_CWORD="4")
    assert ok(vakit(env=words)).split() == ["plain,table", "plain,json", "plain,yaml"]


def _post(api: VakitProcess, path: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        api.base_url + path, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


def _get(api: VakitProcess, path: str) -> dict[str, Any]:
    req = urllib.request.Request(api.base_url + path, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


def test_dead_letters_retry_pause_and_backfill(api: VakitProcess, worker: VakitProcess) -> None:
    sink = start_sink()
    try:
        # A job whose target answers 400 fails at once: a dead letter.
        run_at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        job = _post(api, "/api/v1/jobs", {
            "type": "CLI_DLQ", "runAt": run_at, "target": {"kind": "HTTP", "url": sink.url},
            "payload": {"status": 400}, "maxAttempts": 3,
        })  # fmt: skip
        job_id = job["jobId"]

        # Waiting polls the API directly (a process per poll would be slow);
        # what is checked is what `vakit` prints.
        wait_for(lambda: _get(api, f"/api/v1/jobs/{job_id}")["status"] == "FAILED", what="the job to fail")
        [dead] = [j for j in as_json(vakit("dlq", "list", "--type", "CLI_DLQ", "-o", "json", api=api))["items"]
                  if j["jobId"] == job_id]  # fmt: skip
        assert dead["status"] == "FAILED" and dead["attempt"] == 1 and "400" in (dead["lastError"] or "")
        # Pages of one, followed to the last by --all.
        listed = as_json(vakit("jobs", "list", "--status", "FAILED,CANCELLED", "--limit", "1", "--all", "-o", "json", api=api))
        assert job_id in [j["jobId"] for j in listed["items"]] and listed["missingShards"] == []
        assert listed["nextCursor"] is None
        table = ok(vakit("dlq", "list", api=api))
        assert job_id in table and "LAST_ERROR" in table

        dry = as_json(vakit("dlq", "retry", "--all", "--type", "CLI_DLQ", "--dry-run", "-o", "json", api=api))
        assert dry["jobIds"] == [job_id]
        assert as_json(vakit("jobs", "get", job_id, "-o", "json", api=api))["status"] == "FAILED"  # dry
        # Retried: the same job id, a new attempt series; it fails again (the
        # target still answers 400) with attempt 2.
        ok(vakit("dlq", "retry", job_id, api=api))
        wait_for(
            lambda: _get(api, f"/api/v1/jobs/{job_id}")["status"] == "FAILED"
            and _get(api, f"/api/v1/jobs/{job_id}")["attempt"] == 2,
            what="the retried job's second attempt",
        )
        again = as_json(vakit("jobs", "get", job_id, "-o", "json", api=api))
        assert (again["status"], again["attempt"], again["jobId"]) == ("FAILED", 2, job_id)
        assert {f.job_id for f in sink.firings} == {job_id} and len(sink.firings) == 2
        # `vakit jobs retry` does the same for one job: same id and scheduledFor, attempt 3 next.
        revived = as_json(vakit("jobs", "retry", job_id, "-o", "json", api=api))
        assert (revived["jobId"], revived["scheduledFor"]) == (job_id, again["scheduledFor"])
        wait_for(lambda: _get(api, f"/api/v1/jobs/{job_id}")["attempt"] == 3
                 and _get(api, f"/api/v1/jobs/{job_id}")["status"] == "FAILED", what="the third attempt")  # fmt: skip
        assert len(sink.firings) == 3
        # Neither ids nor --all: usage.
        assert vakit("dlq", "retry", api=api).returncode == 2

        # Pause and resume, by name, with the reason shown.
        ok(vakit("crons", "create", "--name", "hourly", "--schedule", "0 * * * *", "--time-zone", "UTC",
                 "--url", sink.url, "--payload", "{}", api=api))  # fmt: skip
        paused = as_json(vakit("crons", "pause", "hourly", "--reason", "target migration", "-o", "json", api=api))
        assert paused["paused"] is True and paused["pauseReason"] == "target migration"
        assert vakit("crons", "pause", "hourly", api=api).returncode == 2  # --reason is required
        resumed = as_json(vakit("crons", "resume", "hourly", "-o", "json", api=api))
        assert resumed["paused"] is False

        # Backfill a past range: each slot once, a second backfill doubles nothing.
        hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        frm, to = (hour - timedelta(hours=3)).isoformat(), (hour - timedelta(minutes=1)).isoformat()
        first = as_json(vakit("crons", "backfill", "hourly", "--from", frm, "--to", to, "-o", "json", api=api))
        assert first["created"] == 3 and first["existing"] == 0
        again = ok(vakit("crons", "backfill", "hourly", "--from", frm, "--to", to, api=api))
        assert "0 created, 3 existing" in again
    finally:
        sink.close()
