"""`vakit jobs list --label k=v`: each label a repeated ``label`` query
parameter of GET /api/v1/jobs, as the API takes them."""

from __future__ import annotations

import urllib.parse
import urllib.request
from typing import Any

import pytest
from click.testing import CliRunner

from cluster.cli import main


def test_each_label_is_a_repeated_query_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    urls: list[str] = []

    class Answer:
        def __enter__(self) -> Answer:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def read(self) -> bytes:
            return b'{"items": [], "nextCursor": null, "missingShards": []}'

    def urlopen(req: Any, timeout: float) -> Answer:
        urls.append(req.full_url)
        return Answer()

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    args = ["jobs", "list", "--label", "team=payments", "--label", "region=a=b", "--api-url", "http://x"]
    out = CliRunner().invoke(main, [*args, "-o", "json"])
    assert out.exit_code == 0, out.output
    [url] = urls
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert query["label"] == ["team=payments", "region=a=b"]
    # Without --label, no label parameter.
    urls.clear()
    assert CliRunner().invoke(main, ["jobs", "list", "--api-url", "http://x"]).exit_code == 0
    assert "label" not in urllib.parse.parse_qs(urllib.parse.urlsplit(urls[0]).query)
