"""OpenTelemetry tracing, off unless an exporter is configured.

One trace follows a job from the API request that created it to the call that
fires it: the create span's W3C ``traceparent`` is stored with the job (in its
target, under ``traceparent``; the API never shows it), the worker's firing
span is its child, and the HTTP and Kafka targets send the firing span's
``traceparent`` to the receiver. Spans: ``POST /api/v1/jobs`` and every API
route (server), ``db <statement>`` for each named statement on a shard
(client), ``fire <kind>`` per firing (client).

Off is the default and costs one attribute read per hook: every caller tests
:data:`ENABLED` before doing anything else, and nothing of OpenTelemetry is
imported. :func:`setup` turns it on when ``tracing_exporter`` (or
``OTEL_TRACES_EXPORTER``) names an exporter: ``otlp`` (OTLP over HTTP to
``OTEL_EXPORTER_OTLP_ENDPOINT``), ``console``, or a test's in-memory one. The
packages are the ``otel`` extra: ``pip install 'vakit[otel]'``.

Imports nothing of ``cluster`` but its version: every layer may use it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager, nullcontext
from typing import Any

__all__ = [
    "ENABLED",
    "TracingUnavailable",
    "current_traceparent",
    "inject",
    "record",
    "setup",
    "shutdown",
    "span",
    "traceparent_of",
]

ENABLED = False
_tracer: Any = None
_provider: Any = None
_NULL = nullcontext(None)


class TracingUnavailable(RuntimeError):
    """An exporter is configured but OpenTelemetry is not installed."""


def setup(
    service_name: str,
    exporter: str | None = None,
    sample_ratio: float = 1.0,
    *,
    span_exporter: Any = None,
) -> bool:
    """Turn tracing on for this process when an exporter is configured.

    ``exporter``: ``otlp``, ``console`` or ``none`` (default: the
    ``OTEL_TRACES_EXPORTER`` variable, else none). ``span_exporter``: an
    exporter object (the tests' in-memory one), used as given."""
    global ENABLED, _tracer, _provider
    name = (exporter or os.environ.get("OTEL_TRACES_EXPORTER") or "none").strip().lower()
    if span_exporter is None and name in ("", "none"):
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError as exc:
        raise TracingUnavailable(
            f"tracing exporter {name!r} is configured but OpenTelemetry is not installed: "
            "pip install 'vakit[otel]', or unset VAKIT_TRACING_EXPORTER"
        ) from exc
    from cluster import __version__

    provider = TracerProvider(
        resource=Resource.create({"service.name": service_name, "service.version": __version__}),
        sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
    )
    if span_exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    elif name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    elif name == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    else:
        raise ValueError(f"unknown tracing exporter {name!r}: use otlp, console or none")
    _provider = provider
    _tracer = provider.get_tracer("vakit", __version__)
    ENABLED = True
    return True


def shutdown() -> None:
    """Flush and stop: spans still batched are exported."""
    global ENABLED, _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    ENABLED, _tracer, _provider = False, None, None


def _context_of(traceparent: str | None) -> Any:
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def span(
    name: str,
    *,
    kind: str = "internal",
    parent: str | None = None,
    headers: Mapping[str, str] | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> Any:
    """A context manager around a span (or a shared no-op when tracing is off).

    ``parent``: a ``traceparent`` to continue (a job's stored one);
    ``headers``: incoming request headers to continue the caller's trace."""
    if not ENABLED:
        return _NULL
    return _span(name, kind, parent, headers, attributes)


@contextmanager
def _span(
    name: str,
    kind: str,
    parent: str | None,
    headers: Mapping[str, str] | None,
    attributes: Mapping[str, Any] | None,
) -> Iterator[Any]:
    from opentelemetry.trace import SpanKind, Status, StatusCode

    context = None
    if parent:
        context = _context_of(parent)
    elif headers is not None and "traceparent" in headers:
        context = _context_of(headers["traceparent"])
    with _tracer.start_as_current_span(
        name,
        context=context,
        kind=getattr(SpanKind, kind.upper()),
        attributes=dict(attributes or {}),
        record_exception=True,
        set_status_on_exception=True,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def record(
    name: str,
    seconds: float,
    *,
    kind: str = "internal",
    attributes: Mapping[str, Any] | None = None,
) -> None:
    """A span that has just ended, ``seconds`` long, under the current span
    (for work timed already, such as a statement on a shard)."""
    if not ENABLED:
        return
    import time

    from opentelemetry.trace import SpanKind

    end = time.time_ns()
    span = _tracer.start_span(
        name,
        kind=getattr(SpanKind, kind.upper()),
        attributes=dict(attributes or {}),
        start_time=end - int(seconds * 1e9),
    )
    span.end(end_time=end)


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span (None when off or none)."""
    if not ENABLED:
        return None
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def traceparent_of(target: Mapping[str, Any]) -> str | None:
    """The ``traceparent`` a job's target carries from its create, if any."""
    value = target.get("traceparent")
    return value if isinstance(value, str) else None


def inject(headers: MutableMapping[str, Any], stored: str | None = None) -> None:
    """Set ``traceparent`` for an outgoing call: the current span's when
    tracing is on, else the one stored with the job (passed through)."""
    value = current_traceparent() if ENABLED else stored
    if value:
        headers["traceparent"] = value
