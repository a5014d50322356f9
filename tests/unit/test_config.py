"""Shard lists: split only on commas and newlines, each entry a DSN libpq accepts."""

from __future__ import annotations

import pytest

from cluster.config import Settings, split_shards
from cluster.store.dsn import mask_dsn, shard_problems
from cluster.store.layout import ShardPlace, fingerprint_of, layout_problems


def test_a_keyword_dsn_with_spaces_is_one_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VAKIT_SHARDS", "host=a port=1 dbname=x")
    assert Settings().shards == ["host=a port=1 dbname=x"]


def test_commas_and_newlines_separate_shards() -> None:
    assert split_shards("host=a dbname=x, host=b dbname=y\n postgresql://c/z,\n") == [
        "host=a dbname=x",
        "host=b dbname=y",
        "postgresql://c/z",
    ]
    assert split_shards('["postgresql://h1,h2/db", "host=b"]') == ["postgresql://h1,h2/db", "host=b"]


def test_entries_that_are_not_dsns_are_refused_with_the_fix() -> None:
    (problem,) = shard_problems(split_shards("a b c"))
    assert "entry 0" in problem and "not a PostgreSQL DSN" in problem and "commas" in problem
    (problem,) = shard_problems(["postgresql://a/x postgresql://b/y"])
    assert "not a PostgreSQL DSN" in problem
    assert shard_problems([]) == [
        "no shards configured: set VAKIT_SHARDS to the PostgreSQL DSNs in shard order"
    ]
    assert shard_problems(["host=a dbname=x", "postgresql://b/y"]) == []


def test_one_database_listed_twice_is_refused() -> None:
    (problem,) = shard_problems(["host=a port=5 dbname=x", "postgresql://a:5/x"])
    assert "entries 0 and 1 are the same database" in problem


def test_passwords_never_reach_a_message() -> None:
    assert "s3cret" not in mask_dsn("postgresql://u:s3cret@h/db")
    problems = shard_problems(["postgresql://u:s3cret@h/db", "host=h user=u password=other dbname=db"])
    assert problems and not any("s3cret" in p or "other" in p for p in problems)


def _placed(n: int, fp: str, order: list[int]) -> list[ShardPlace]:
    return [
        ShardPlace(pos, f"dbname=d{pos}", True, shard_uuid=f"u{idx}", shard_index=idx,
                   shard_count=n, fingerprint=fp)
        for pos, idx in enumerate(order)
    ]  # fmt: skip


def test_layout_problems_name_reordered_shrunk_and_mixed_lists() -> None:
    fp = fingerprint_of(["u0", "u1"])
    assert layout_problems(_placed(2, fp, [0, 1])) == []
    swapped = layout_problems(_placed(2, fp, [1, 0]))
    assert len(swapped) == 2 and "entry 0" in swapped[0] and "is shard 1 of 2" in swapped[0]
    (shrunk,) = layout_problems(_placed(2, fp, [0, 1])[:1])
    assert "this list makes it shard 0 of 1" in shrunk
    grown = [*_placed(2, fp, [0, 1]), ShardPlace(2, "dbname=d2", True)]
    assert any("belongs to no layout" in p for p in layout_problems(grown))
