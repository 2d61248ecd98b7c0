"""Spans of this process, captured in memory for a test (OpenTelemetry's in-memory exporter)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from threadline.ops import tracing


def captured_spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Turn tracing on in this process with an in-memory exporter until the generator is closed
    (a fixture's body: ``yield from captured_spans(monkeypatch)``); yields the exporter, whose
    ``get_finished_spans()`` lists the spans ended so far."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("threadline"))
    monkeypatch.setattr(tracing, "_enabled", True)
    yield exporter
    provider.shutdown()
