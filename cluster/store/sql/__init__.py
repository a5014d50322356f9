"""Named SQL: every statement of the PostgreSQL store, and the migrations.

The statements are cut as the store is, one file per role contract and
table (``jobs_intake.sql``, ``jobs_claims.sql``, ``jobs_upkeep.sql``,
``jobs_insight.sql``, ``crons_intake.sql``, ``crons_upkeep.sql``,
``shards.sql``, ``moves.sql``, ``calendars.sql``, ``limits.sql``), each of ``-- name: <name>`` blocks. :data:`QUERIES` maps
every name of every file to its text, in one namespace, loaded once; a name
defined twice, in one file or in two, is refused. A job's (and a cron's) column lists are
written ``{job.given}``, ``{job.read:j}`` and the like: each is expanded
once, here, into the literal list :mod:`cluster.model.columns` describes
(with the table alias after the colon), so the planner sees plain SQL and a
new field of a job needs no statement edited by hand. The slot fence
(migration 21) is written ``{fence:<id>}`` in a write's WHERE: the row
is skipped when its slot is fenced on this shard (a claim, a pass of a
leader loop); ``{fence_refuse:<id>}`` raises SQLSTATE VKS01 instead (a
write the API asked for, which the store answers with
:class:`~cluster.errors.SlotMoving`). Each expands here into a
``NOT EXISTS`` on ``slot_fences`` (:func:`expand_fences`). Migrations are
``migrations/NNNN_name.sql``, applied in order by :mod:`cluster.store.migrate`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from cluster.model.columns import column_lists

__all__ = [
    "DERIVED",
    "QUERIES",
    "Migration",
    "except_limited",
    "expand_columns",
    "expand_fences",
    "load_all_queries",
    "load_migrations",
    "load_queries",
]

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
# {job.<list>} or {cron.<list>:<alias>}: a column list of cluster.model.columns.
_COLUMNS = re.compile(r"\{(job|cron)\.(\w+)(?::(\w+))?\}")


def expand_columns(name: str, text: str) -> str:
    """``text`` with every ``{job.<list>[:alias]}`` (and ``{cron.…}``)
    replaced by its columns."""

    def expand(match: re.Match[str]) -> str:
        lists = column_lists(match[1], f"{match[3]}." if match[3] else "")
        if match[2] not in lists:
            raise ValueError(f"query {name!r} names an unknown column list {match[0]}")
        return lists[match[2]]

    return _COLUMNS.sub(expand, text)


# {fence:<expression>} or {fence_refuse:<expression>}: the slot fence of a
# write on the row whose id is the expression.
_FENCE = re.compile(r"\{(fence|fence_refuse):([^{}]+)\}")


def expand_fences(text: str) -> str:
    """``text`` with every ``{fence:x}`` and ``{fence_refuse:x}`` replaced
    by the test on ``slot_fences`` for the row whose id is ``x``. A fenced
    row is skipped; with ``fence_refuse`` the statement fails with
    SQLSTATE VKS01 (``vakit_slot_refused`` runs only for the fence row the
    row's slot matched).

    The test first asks whether the table has a row at all: a statement
    reads that once (an InitPlan), and on a shard that moves no slot (the
    table is empty, as it is but during a move) no row is tested further.
    A plain anti-join probed the fence index once per row: claiming and
    finishing 20,000 jobs on a lab shard cost 1 and 4 us more per job
    (medians of 60 batches of 500), and this form nothing measurable."""

    def expand(match: re.Match[str]) -> str:
        row = f"vakit_slot({match[2].strip()})"
        refuse = ""
        if match[1] == "fence_refuse":
            refuse = f" AND vakit_slot_refused(f.slot, f.state, {row})"
        return (
            "(NOT EXISTS (SELECT FROM slot_fences) OR NOT EXISTS "
            f"(SELECT 1 FROM slot_fences f WHERE f.slot = {row}{refuse}))"
        )

    return _FENCE.sub(expand, text)


def load_queries(text: str) -> dict[str, str]:
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        # Drop the leading comment lines: they document, psycopg needn't parse them.
        lines = [ln for ln in body.strip().splitlines() if not ln.startswith("--")]
        queries[name] = "\n".join(lines).strip().rstrip(";")
    return queries


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    folder = resources.files(__package__).joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, got {versions}")
    return found


def load_all_queries() -> dict[str, str]:
    """The statements of every ``*.sql`` file here (not the migrations), by
    name, in one namespace."""
    queries: dict[str, str] = {}
    files = sorted(
        (e for e in resources.files(__package__).iterdir() if e.name.endswith(".sql")),
        key=lambda e: e.name,
    )
    for entry in files:
        for name, text in load_queries(entry.read_text()).items():
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice ({entry.name})")
            queries[name] = expand_fences(expand_columns(name, text))
    for name, (source, derive) in DERIVED.items():
        queries[name] = derive(queries[source])
    return queries


_DUE = "WHERE status = 'SCHEDULED'"


def except_limited(claim: str) -> str:
    """The regular claim leaving out the jobs of the keys in
    ``%(limited)s`` (issue 44: those are claimed by ``claim_limited``).
    Derived, not copied: the claim stays one statement, and with no limit
    set the worker runs ``claim_jobs`` itself, unchanged."""
    if _DUE not in claim:
        raise ValueError("claim_jobs no longer says " + _DUE)
    return claim.replace(
        _DUE, _DUE + "\n       AND vakit_limit_key(target_kind, target) <> ALL(%(limited)s)", 1
    )


# Statements made from another one rather than written out (name: (source,
# how)): a variant that must not drift from its source.
DERIVED: dict[str, tuple[str, Callable[[str], str]]] = {
    "claim_jobs_except": ("claim_jobs", except_limited),
}


QUERIES: dict[str, str] = load_all_queries()
