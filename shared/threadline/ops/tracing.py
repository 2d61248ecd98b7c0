"""Traces: OpenTelemetry spans across the services, with the W3C trace context carried by every
event (the envelope's ``trace`` and the record's ``traceparent`` header) and by every chunk
record, so that one trace runs from a client's request through ingress, the orchestrator, each
step, each model call and each tool, to the chunks.

Off unless configured, and then free: without an exporter no SDK is installed, the API's tracer
is a no-op and nothing is injected. On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set — OTLP over HTTP, configured by the standard
``OTEL_*`` variables (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, headers, sampling) —
or when ``THREADLINE_TRACE_FILE`` names a file, which gets one JSON span per line (tests).
``OTEL_SDK_DISABLED=true`` turns it off. PostgreSQL statements become spans too (the maintained
asyncpg instrumentation).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import Attributes

_enabled = False
_provider: TracerProvider | None = None
_tracer: Tracer | None = None
"""The tracer every span of Threadline comes from, once :func:`configure` turned tracing on
(OpenTelemetry is imported only then: a process without tracing does not load it)."""


def enabled() -> bool:
    """True once :func:`configure` installed an exporter in this process."""
    return _enabled


def configure(service: str) -> bool:
    """Install the SDK with the configured exporters for ``service`` (its ``service.name`` is
    ``threadline-<service>`` unless ``OTEL_SERVICE_NAME`` says otherwise); returns whether
    tracing is on. Called once per process, at start."""
    global _enabled, _provider, _tracer
    if _enabled or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return _enabled
    otlp = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    path = os.environ.get("THREADLINE_TRACE_FILE")
    if not (otlp or path) and "opentelemetry.sdk.trace" not in sys.modules:
        return False  # nothing configured, and the application did not load the SDK either
    from opentelemetry import trace

    if type(trace.get_tracer_provider()).__name__ == "TracerProvider":  # the application installed the SDK
        _tracer, _enabled = trace.get_tracer("threadline"), True
        return True
    if not (otlp or path):
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or f"threadline-{service}"})
    provider = TracerProvider(resource=resource)
    if otlp:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if path:
        out = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the life of the process
        provider.add_span_processor(SimpleSpanProcessor(
            ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")))
    trace.set_tracer_provider(provider)
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

    AsyncPGInstrumentor().instrument(tracer_provider=provider)
    _provider, _tracer, _enabled = provider, provider.get_tracer("threadline"), True
    return True


def shutdown() -> None:
    """Export what is left (service stop)."""
    if _provider is not None:
        _provider.shutdown()


def inject(carrier: dict[str, str]) -> dict[str, str]:
    """Put the current trace context (``traceparent``, ``tracestate``) into ``carrier``; returns it.
    Nothing when tracing is off or no span is current."""
    if _enabled:
        from opentelemetry import propagate

        propagate.inject(carrier)
    return carrier


def headers_of(trace_fields: Mapping[str, str]) -> list[tuple[str, bytes]]:
    """Record headers for an envelope's ``trace`` fields."""
    return [(k, v.encode()) for k, v in trace_fields.items() if k in ("traceparent", "tracestate")]


def current_headers() -> list[tuple[str, bytes]]:
    """Record headers for the current trace context (``[]`` when off)."""
    return headers_of(inject({})) if _enabled else []


def _from_headers(headers: Iterable[tuple[str, bytes | str]] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in headers or ():
        if key in ("traceparent", "tracestate"):
            out[key] = value.decode(errors="replace") if isinstance(value, bytes | bytearray) else str(value)
    return out


def _on() -> Tracer:
    """The tracer (tracing is on)."""
    assert _tracer is not None, "tracing is off"
    return _tracer


def _attributes(attributes: Mapping[str, object]) -> Attributes:
    """The span attributes without the ``None`` values (OpenTelemetry drops a value of a type
    it does not take, with a warning)."""
    return cast("Attributes", {k: v for k, v in attributes.items() if v is not None})


@contextmanager
def consuming(topic: str, headers: Iterable[tuple[str, bytes | str]] | None,
              **attributes: object) -> Iterator[None]:
    """A consumer span for handling one record of ``topic``, the child of the context its
    headers carry (a new trace when they carry none). A no-op when tracing is off."""
    if not _enabled:
        yield
        return
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace

    parent = propagate.extract(_from_headers(headers))
    token = otel_context.attach(parent)
    try:
        attrs = _attributes({"messaging.system": "kafka", "messaging.destination.name": topic, **attributes})
        with _on().start_as_current_span(f"{topic} process", kind=trace.SpanKind.CONSUMER, attributes=attrs):
            yield
    finally:
        otel_context.detach(token)


@contextmanager
def serving(method: str, path: str, headers: Iterable[tuple[str, bytes | str]] | None) -> Iterator[Span | None]:
    """An HTTP server span for one request (``method``, the URL ``path``), the child of the W3C
    context its ``traceparent``/``tracestate`` headers carry (a new trace without them), current
    while the request is handled, so what it publishes joins the trace. Yields the span, for the
    caller to name by its route and give its status; ``None`` (a no-op) when tracing is off."""
    if not _enabled:
        yield None
        return
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace

    token = otel_context.attach(propagate.extract(_from_headers(headers)))
    try:
        attrs = _attributes({"http.request.method": method, "url.path": path})
        with _on().start_as_current_span(method, kind=trace.SpanKind.SERVER, attributes=attrs) as server:
            yield server
    finally:
        otel_context.detach(token)


def current_span() -> Span | None:
    """The span current in this context (the step's, a tool's…), for user code to annotate;
    ``None`` when tracing is off."""
    if not _enabled:
        return None
    from opentelemetry import trace

    return trace.get_current_span()


def start_span(name: str, **attributes: object) -> Span | None:
    """A span under the current one that the caller ends (``.end()``), for work that spans the
    yields of an async generator (a model call's stream); ``None`` when tracing is off."""
    if not _enabled:
        return None
    return _on().start_span(name, attributes=_attributes(attributes))


@contextmanager
def span(name: str, **attributes: object) -> Iterator[None]:
    """An internal span (a step, a model call, a tool) under the current one; a no-op when off.
    ``None`` attribute values are left out."""
    if not _enabled:
        yield
        return
    with _on().start_as_current_span(name, attributes=_attributes(attributes)):
        yield
