"""Structured logs: one JSON object per line, with the fields passed as
``extra`` (``job_id``, ``shard``, ``attempt``, …) kept as fields."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

__all__ = ["JsonFormatter", "setup_logging"]

_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def __init__(self, process_name: str) -> None:
        super().__init__()
        self.process_name = process_name

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "process": self.process_name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(process_name: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(process_name))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The pool logs every reconnect attempt at INFO while a shard is down.
    logging.getLogger("psycopg.pool").setLevel(logging.WARNING)
    logging.getLogger("kazoo.client").setLevel(logging.WARNING)
