"""Rules every statement and migration of ours keeps, checked on the text.

No ``NOT IN (SELECT …)``: PostgreSQL cannot turn it into an anti-join (a
NULL on the right changes its answer), so it runs as a subplan, hashed only
when the planner thinks the right side fits in ``work_mem``. Over a CTE of
an array statement it guesses millions of rows and rescans the CTE for
every row on the left: the materializer's page of 2,000 crons spent 600 of
its 670 ms there. ``NOT EXISTS`` says the same for non-NULL keys and is an
anti-join (the PostgreSQL wiki's "Don't Do This" has the rule too).
"""

from __future__ import annotations

import re

from cluster.store.sql import QUERIES, load_migrations

_NOT_IN_SUBQUERY = re.compile(r"\bNOT\s+IN\s*\(\s*SELECT\b", re.IGNORECASE)


def _code(sql: str) -> str:
    """``sql`` without its ``--`` comments (which may quote the rule)."""
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


def test_no_statement_uses_not_in_over_a_subquery() -> None:
    offenders = [name for name, sql in QUERIES.items() if _NOT_IN_SUBQUERY.search(_code(sql))]
    offenders += [m.name for m in load_migrations() if _NOT_IN_SUBQUERY.search(_code(m.sql))]
    assert offenders == []


def test_the_rule_sees_what_it_forbids() -> None:
    assert _NOT_IN_SUBQUERY.search(_code("WHERE f.id NOT IN (SELECT id FROM near_rows)"))
    assert _NOT_IN_SUBQUERY.search(_code("where x not in\n  ( select 1 )"))
    assert not _NOT_IN_SUBQUERY.search(_code("WHERE NOT EXISTS (SELECT FROM n WHERE n.id = f.id)"))
    assert not _NOT_IN_SUBQUERY.search(_code("-- was: f.id NOT IN (SELECT id FROM near_rows)"))
    assert not _NOT_IN_SUBQUERY.search(_code("WHERE status NOT IN ('SUCCEEDED', 'FAILED')"))
