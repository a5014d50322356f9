"""How the ``vakit`` command line prints what the API answers: a table for
people, JSON or YAML for scripts (``-o json|yaml``), the API's own field
names in every format."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click
import yaml

__all__ = ["FORMATS", "emit", "table"]

FORMATS = ("table", "json", "yaml")


def emit(
    data: Any, fmt: str, columns: Sequence[str] = (), rows: Sequence[Any] | None = None
) -> None:
    """Print ``data`` as ``fmt``. A table shows ``rows`` (default: ``data``
    itself, or ``[data]`` for one object) by ``columns``; JSON and YAML print
    ``data`` whole."""
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
    elif fmt == "yaml":
        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip())
    else:
        if rows is None:
            rows = data if isinstance(data, list) else [data]
        click.echo(table(rows, columns))


def table(rows: Sequence[Any], columns: Sequence[str]) -> str:
    """Rows of dicts as aligned columns; a column is a field name, or
    ``field:HEADER`` to print it under another header."""
    specs = [c.split(":", 1) if ":" in c else [c, _header(c)] for c in columns]
    cells = [[_cell(_get(r, field)) for field, _ in specs] for r in rows]
    headers = [h for _, h in specs]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _header(field: str) -> str:
    out = []
    for ch in field.split(".")[-1]:
        if ch.isupper():
            out.append("_")
        out.append(ch.upper())
    return "".join(out)


def _get(row: Any, field: str) -> Any:
    value = row
    for part in field.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    text = str(value).replace("\n", " ")
    return text if len(text) <= 120 else text[:117] + "..."
