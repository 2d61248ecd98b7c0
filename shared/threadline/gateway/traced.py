"""HTTP server spans (docs/gateway.md, "Tracing"): every request to the gateway is a ``SERVER``
span named ``<METHOD> <route>`` (``POST /v1/resources/{resource_id}/threads/{thread_id}/messages``),
the child of the W3C trace context of its ``traceparent`` header, so a browser's or a backend's
trace continues through the gateway; the request the gateway publishes to Kafka carries that
span's context (:mod:`threadline.ops.tracing`), so ingress, the orchestrator and the worker join
the same trace. The span lasts until the answer is sent (a stream's span: the whole stream). A
no-op when tracing is off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from threadline.ops import tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Span

UNTRACED = frozenset({"/healthz", "/readyz", "/metrics"})
"""Paths probed every few seconds, whose spans would only be noise."""


class ServerSpans:
    """ASGI middleware: one server span per HTTP request (see the module's docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not tracing.enabled() or scope["path"] in UNTRACED:
            await self.app(scope, receive, send)
            return
        headers = [(key.decode("latin-1"), value) for key, value in scope.get("headers", ())]
        with tracing.serving(scope["method"], scope["path"], headers) as span:
            status: list[int] = []

            async def sending(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status.append(message["status"])
                await send(message)

            try:
                await self.app(scope, receive, sending)
            finally:
                if span is not None:
                    _finish(span, scope, status[0] if status else None)


def _finish(span: Span, scope: Scope, status: int | None) -> None:
    """Name the span by its route template and mark a 5xx answer as an error."""
    route = getattr(scope.get("route"), "path", None)
    if route:
        span.update_name(f"{scope['method']} {route}")
        span.set_attribute("http.route", route)
    if status is not None:
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR))
