"""The gateway's HTTP server spans (docs/gateway.md, "Tracing"): named by route, under the
caller's ``traceparent``, a 5xx marked an error, probes left out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.testclient import TestClient

from threadline.client.client import BrokerUnavailableError
from threadline.gateway.app import Gateway, make_app
from threadline.gateway.auth import AuthConfig
from threadline.store import queries
from threadline.testing.spans import captured_spans

TRACE, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    yield from captured_spans(monkeypatch)


class _Unreachable:
    async def send_message(self, *_: Any, **__: Any) -> Any:
        raise BrokerUnavailableError("not acknowledged in time")


def test_a_request_is_a_server_span_under_the_callers_traceparent(spans: InMemorySpanExporter,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    async def thread_owner(_: Any, thread_id: str) -> str | None:
        return None

    monkeypatch.setattr(queries, "thread_owner", thread_owner)
    http = TestClient(make_app(Gateway(_Unreachable(), None, AuthConfig(open=True))))  # type: ignore[arg-type]  # stubs
    r = http.post("/v1/resources/u1/threads/t1/messages", json={"message": "hi", "agent_id": "a"},
                  headers={"traceparent": f"00-{TRACE}-{PARENT}-01"})
    assert r.status_code == 503
    assert http.get("/healthz").status_code == 200
    (span,) = spans.get_finished_spans()  # the probe made none
    assert span.name == "POST /v1/resources/{resource_id}/threads/{thread_id}/messages"
    assert span.kind == SpanKind.SERVER
    assert f"{span.context.trace_id:032x}" == TRACE and span.parent is not None
    assert f"{span.parent.span_id:016x}" == PARENT
    assert span.attributes is not None and span.attributes["http.response.status_code"] == 503
    assert span.attributes["http.route"] == "/v1/resources/{resource_id}/threads/{thread_id}/messages"
    assert span.status.status_code == StatusCode.ERROR
    spans.clear()
    http.get("/openapi.json")
    (fresh,) = spans.get_finished_spans()
    assert fresh.parent is None and fresh.status.status_code != StatusCode.ERROR  # no traceparent: a new trace
