"""The benchmark sampler's split of PostgreSQL's CPU by process kind."""

from __future__ import annotations

import pytest

from benchmarks.harness import postgres_kind


@pytest.mark.parametrize(
    ("title", "kind"),
    [
        ("postgres: autovacuum worker vakit", "autovacuum"),
        ("postgres: autovacuum launcher", "autovacuum"),
        ("postgres: checkpointer", "checkpointer"),
        ("postgres: background writer", "bgwriter"),
        ("postgres: walwriter", "walwriter"),
        ("postgres: postgres vakit 127.0.0.1(51234) idle", "backends"),
        ("/usr/lib/postgresql/15/bin/postgres -D /tmp/pg0 -p 5433", "backends"),
    ],
)
def test_a_postgres_process_is_known_by_its_title(title: str, kind: str) -> None:
    assert postgres_kind(title) == kind
