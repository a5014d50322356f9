"""`vakit dlq retry --all`: calls of --limit, each going on below the jobs
the last one examined (the API's nextCursor)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from cluster.cli import main
from cluster.cli_client.http import ApiClient


def test_a_refused_job_is_reported_once_and_the_jobs_below_it_are_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The API's pages as the cursor walks them: the newest dead letter is
    # refused (at its attempt cap), the two below it are retried.
    pages: dict[str | None, dict[str, Any]] = {
        None: {"jobIds": [], "failed": [{"jobId": "job_3", "status": 409, "detail": "100 attempts"}],
               "more": True, "nextCursor": "job_3"},
        "job_3": {"jobIds": ["job_2"], "failed": [], "more": True, "nextCursor": "job_2"},
        "job_2": {"jobIds": ["job_1"], "failed": [], "more": False, "nextCursor": None},
    }  # fmt: skip
    sent: list[Any] = []

    def request(self: ApiClient, method: str, path: str, *, params: Any = None, body: Any = None) -> Any:
        assert (method, path) == ("POST", "/api/v1/jobs:retry")
        sent.append(dict(body))
        return {"dryRun": False, "missingShards": [], **pages[body.get("cursor")]}

    monkeypatch.setattr(ApiClient, "request", request)
    out = CliRunner().invoke(main, ["dlq", "retry", "--all", "--limit", "1", "--api-url", "http://x"])
    assert [b.get("cursor") for b in sent] == [None, "job_3", "job_2"]
    assert all(b["limit"] == 1 and b["status"] == ["FAILED"] for b in sent)
    assert "2 job(s) retried, 1 refused" in out.output
    assert out.exit_code == 1  # something was refused: said, and not a success
