"""The gateway continues a caller's trace (docs/gateway.md, "Tracing"): a request with a W3C
``traceparent`` becomes a server span under it, and the request the gateway publishes carries
that span's context, so ingress, the orchestrator and the worker's steps join one trace. The
gateway runs in this process (its spans go to an in-memory exporter); each service writes its
spans to a file (``THREADLINE_TRACE_FILE``), as in tests/e2e/test_traces.py."""

from __future__ import annotations

import secrets
import uuid

import httpx

from tests.e2e.helpers import SERVICE_NAMES, own_services
from tests.e2e.test_traces import _file_spans, client_spans  # noqa: F401 - client_spans is a fixture
from threadline.gateway.server import build


async def test_a_traceparent_yields_one_trace_from_the_gateway_through_the_worker(services, settings, model,
                                                                                   tmp_path, client_spans):  # noqa: F811 - the fixture
    thread = f"th-gwtrace-{uuid.uuid4().hex[:6]}"
    model.queue({"text": "traced over HTTP"}, model="threadline-gateway")
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    files = {name: tmp_path / f"{name}.spans.jsonl" for name in SERVICE_NAMES}
    app, gateway = build(settings.model_copy(update={"gateway_open": True}))
    with own_services(services, "gwtraced", env_of=lambda name: {"THREADLINE_TRACE_FILE": str(files[name])}):
        await gateway.db.start()
        await gateway.client.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
                r = await http.post(f"/v1/resources/res-1/threads/{thread}/generate",
                                    json={"message": "hi", "agent_id": "gateway", "timeout_s": 60},
                                    headers={"traceparent": f"00-{trace_id}-{caller_span}-01"})
                assert r.status_code == 200, r.text
        finally:
            await gateway.client.stop()
            await gateway.db.stop()
    mine = [s for s in client_spans.get_finished_spans() if f"{s.context.trace_id:032x}" == trace_id]
    server = next(s for s in mine if s.name == "POST /v1/resources/{resource_id}/threads/{thread_id}/generate")
    assert server.parent is not None and f"{server.parent.span_id:016x}" == caller_span  # the caller's trace goes on
    assert server.attributes["http.response.status_code"] == 200
    publish = next(s for s in mine if s.name.endswith(".ingress publish"))
    assert publish.parent is not None and publish.parent.span_id == server.context.span_id
    spans = [s for s in _file_spans(list(files.values())) if s["context"]["trace_id"] == f"0x{trace_id}"]
    ids = {s["context"]["span_id"] for s in spans} | {f"0x{s.context.span_id:016x}" for s in mine}
    # every service span hangs from a span of the same trace: one tree under the caller's span
    assert all(s["parent_id"] in ids for s in spans), [(s["name"], s["parent_id"]) for s in spans]
    names = [s["name"] for s in spans]
    assert any(n.endswith(".ingress process") for n in names) and "step 0" in names
    assert any(n.startswith("chat ") for n in names)
