"""The store stays cut by role (issue 41): no named-SQL file over ~600
lines, no module of cluster/store over ~500, and every statement defined in
exactly one file, all of them loaded into one namespace."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

import cluster.store
from cluster.store.sql import DERIVED, QUERIES, load_queries

_SQL = resources.files("cluster.store.sql")
_STORE = Path(cluster.store.__file__).parent


def _sql_files() -> list[str]:
    return sorted(e.name for e in _SQL.iterdir() if e.name.endswith(".sql"))


@pytest.mark.parametrize("name", _sql_files())
def test_no_sql_file_is_over_600_lines(name: str) -> None:
    assert len(_SQL.joinpath(name).read_text().splitlines()) <= 600


@pytest.mark.parametrize("path", sorted(_STORE.rglob("*.py")), ids=lambda p: str(p.relative_to(_STORE)))
def test_no_store_module_is_over_500_lines(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 500


def test_every_statement_is_in_one_file_and_all_are_loaded() -> None:
    names = [n for f in _sql_files() for n in load_queries(_SQL.joinpath(f).read_text())]
    assert len(names) == len(set(names))
    # And the variants made from one of them (not written out, so that they
    # cannot drift from it).
    assert not set(names) & set(DERIVED)
    assert set(names) | set(DERIVED) == set(QUERIES)
    for name, (source, derive) in DERIVED.items():
        assert source in names and QUERIES[name] == derive(QUERIES[source]) != QUERIES[source]


def test_a_name_defined_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        load_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")
