"""Structured logs: one JSON object per line, with context bound per request or job.

Fields come from three places, later ones winning: what is bound in the
current context (:func:`bind`: ``request_id`` and ``owner`` for an API
request; :func:`bind_subject`: ``job_id``, ``shard``, ``attempt`` and
``owner`` in a worker's task for one job), the record's ``extra`` (``job_id``, ``shard``, …), and
``trace_id``/``span_id`` when tracing is on. The level is ``VAKIT_LOG_LEVEL`` (default ``info``).

Why the standard library's ``contextvars`` and not structlog: every module
already logs through ``logging`` with ``extra=``; a context variable carries
per-request fields into those same calls (asyncio copies the context into
each task, so a request's fields stay with it), for one dictionary merge per
line written and nothing at all per request that logs nothing. structlog
would mean a second logging API beside the stdlib one that uvicorn, kazoo and
psycopg use, and a dependency, for the same JSON lines.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Any

from cluster import tracing

__all__ = [
    "JsonFormatter",
    "bind",
    "bind_subject",
    "bound",
    "context",
    "setup_logging",
    "unbind",
]

_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
_EMPTY: dict[str, Any] = {}
_CONTEXT: ContextVar[dict[str, Any]] = ContextVar("vakit_log_context", default=_EMPTY)
# What a task is about (a worker's job), turned into fields only when a line
# is written: a wave starts 100,000 job tasks, and binding a dictionary in
# each (1.2 us) was a tenth of a job's start, for lines almost none write.
_SUBJECT: ContextVar[tuple[Callable[[Any], dict[str, Any]], Any] | None] = ContextVar(
    "vakit_log_subject", default=None
)

LEVELS = ("debug", "info", "warning", "error", "critical")


def context() -> dict[str, Any]:
    """The fields bound in the current context."""
    return _CONTEXT.get()


def bind(**fields: Any) -> Token[dict[str, Any]]:
    """Add ``fields`` to every log line of the current context (a request's
    task, a job's task); returns the token :func:`unbind` takes."""
    return _CONTEXT.set({**_CONTEXT.get(), **fields})


def unbind(token: Token[dict[str, Any]]) -> None:
    _CONTEXT.reset(token)


def bind_subject(fields: Callable[[Any], dict[str, Any]], subject: Any) -> None:
    """Every log line of the current context gets ``fields(subject)``,
    computed when the line is written (under what :func:`bind` bound).
    A task's context lives as long as the task: a subject that holds the
    task is a reference cycle until :func:`unbind_subject`."""
    _SUBJECT.set((fields, subject))


def unbind_subject() -> None:
    """The current context's lines are about no subject any more."""
    _SUBJECT.set(None)


@contextmanager
def bound(**fields: Any) -> Iterator[None]:
    token = bind(**fields)
    try:
        yield
    finally:
        unbind(token)


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
        subject = _SUBJECT.get()
        if subject is not None:
            out.update(subject[0](subject[1]))
        out.update(_CONTEXT.get())
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        if tracing.ENABLED:
            parent = tracing.current_traceparent()
            if parent:
                _, trace_id, span_id, _ = parent.split("-")
                out["trace_id"], out["span_id"] = trace_id, span_id
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(process_name: str, level: str = "INFO") -> None:
    if level.lower() not in LEVELS:
        raise ValueError(f"log level {level!r}: use one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(process_name))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The pool logs every reconnect attempt at INFO while a shard is down.
    logging.getLogger("psycopg.pool").setLevel(logging.WARNING)
    logging.getLogger("kazoo.client").setLevel(logging.WARNING)
