"""A cron's row on PostgreSQL: a definition as the single and the batch
statements take it, derived from its columns (:mod:`cluster.model.columns`),
as the named SQL's lists are: a new field of a cron needs no edit here."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from psycopg.types.json import Jsonb

from cluster.model import CronRecord
from cluster.model.columns import CRON_GIVEN
from cluster.model.jsontext import json_bytes, json_text

__all__ = ["cron_columns", "cron_row"]


def cron_row(c: CronRecord) -> dict[str, Any]:
    """The single statements' parameters (insert_cron, update_cron)."""
    row: dict[str, Any] = {}
    for column in CRON_GIVEN:
        value = getattr(c, column.source)
        # orjson's text (json_bytes), not psycopg's default json.dumps.
        row[column.param] = Jsonb(value, json_bytes) if column.sql_type == "jsonb" else value
    return row


# What a batch reads of each record, made once from the columns: the
# values of one record at once, in the columns' order (a getattr and a
# Column.source a value cost a batch create more than the statement's
# own parameters), and which of them travel as JSON text.
_NAMES = tuple(c.name for c in CRON_GIVEN)
_given_values = attrgetter(*(c.source for c in CRON_GIVEN))
_JSON_AT = tuple(at for at, c in enumerate(CRON_GIVEN) if c.sql_type == "jsonb")


def cron_columns(crons: Sequence[CronRecord]) -> dict[str, Any]:
    """insert_crons' arrays, one per column, named as the columns; JSON as
    text (orjson's, json_text), parsed by the statement's cast."""
    if not crons:
        return {name: [] for name in _NAMES}
    # Each record's values as a row, then the rows turned into columns.
    columns = [list(values) for values in zip(*map(_given_values, crons), strict=True)]
    for at in _JSON_AT:
        columns[at] = [json_text(v) for v in columns[at]]
    return dict(zip(_NAMES, columns, strict=True))
