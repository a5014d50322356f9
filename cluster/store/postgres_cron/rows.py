"""A cron's row on PostgreSQL: a definition as the single and the batch
statements take it, derived from its columns (:mod:`cluster.model.columns`),
as the named SQL's lists are: a new field of a cron needs no edit here."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from cluster.model import CronRecord
from cluster.model.columns import CRON_GIVEN
from cluster.model.jsontext import json_bytes

__all__ = ["cron_columns", "cron_row"]


def cron_row(c: CronRecord) -> dict[str, Any]:
    """The single statements' parameters (insert_cron, update_cron)."""
    row: dict[str, Any] = {}
    for column in CRON_GIVEN:
        value = getattr(c, column.source)
        # orjson's text (json_bytes), not psycopg's default json.dumps.
        row[column.param] = Jsonb(value, json_bytes) if column.sql_type == "jsonb" else value
    return row


def cron_columns(crons: Sequence[CronRecord]) -> dict[str, Any]:
    """insert_crons' arrays, one per column, named as the columns; JSON as
    text, parsed by the statement's cast."""
    columns: dict[str, Any] = {}
    for column in CRON_GIVEN:
        values = [getattr(c, column.source) for c in crons]
        if column.sql_type == "jsonb":
            values = [json.dumps(v, separators=(",", ":")) for v in values]
        columns[column.name] = values
    return columns
