"""Traces: one connected trace for a turn with a tool call — from the client's request
through ingress, the run-orchestrator, each step, each model call and the tool, to the chunks —
with the W3C context in the events and the records' headers. The client's spans go to an
in-memory exporter; each service writes its spans to a file (``THREADLINE_TRACE_FILE``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.e2e.helpers import SERVICE_NAMES, collect_run, own_services
from tests.e2e.records import read_records
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms
from threadline.testing.spans import captured_spans
from threadline.topics import Topics


@pytest.fixture
def client_spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process (the client) with an in-memory exporter, for this test only."""
    yield from captured_spans(monkeypatch)


def _file_spans(paths: list[Path]) -> list[dict]:
    spans = []
    for path in paths:
        if path.exists():
            spans += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return spans


async def test_one_connected_trace_for_a_turn_with_a_tool_call(services, settings, model, cluster, tmp_path,
                                                               client_spans):
    thread = f"th-trace-{uuid.uuid4().hex[:6]}"
    model.queue([ms.tool_calls(ms.tool_call("nap", {"seconds": 0.1}, id="n1")), ms.text("rested and traced")],
                model="threadline-sleepy")
    files = {name: tmp_path / f"{name}.spans.jsonl" for name in SERVICE_NAMES}
    with own_services(services, "traced", env_of=lambda name: {"THREADLINE_TRACE_FILE": str(files[name])}):
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            await (await tl.stream("nap", agent_id="sleepy-tools", resource_id="res-1", thread_id=thread)).accepted
            chunks = await collect_run(sub, timeout_s=60)
            await sub.unsubscribe()
    assert chunks[-1]["type"] == "finish"  # the traced services stopped (spans flushed) on leaving the block
    root = next(s for s in client_spans.get_finished_spans() if s.name.endswith(".ingress publish"))
    trace_id = f"0x{root.context.trace_id:032x}"
    spans = [s for s in _file_spans(list(files.values())) if s["context"]["trace_id"] == trace_id]
    names = [s["name"] for s in spans]
    ids = {s["context"]["span_id"] for s in spans} | {f"0x{root.context.span_id:016x}"}
    # every span of the trace hangs from another span of it: one tree, rooted at the client's publish
    assert all(s["parent_id"] in ids for s in spans), [(s["name"], s["parent_id"]) for s in spans]
    assert any(n.endswith(".ingress process") for n in names)
    assert any(n.endswith((".run-commands process", ".step-results process")) for n in names)
    assert any(n.endswith(".step-tasks process") for n in names)
    assert "step 0" in names and "step 1" in names
    assert names.count("chat openai/threadline-sleepy") >= 2 and "execute_tool nap" in names
    services_seen = {s["resource"]["attributes"]["service.name"] for s in spans}
    assert {"threadline-ingress", "threadline-run_orchestrator", "threadline-processor_worker"} <= services_seen
    # the chunks carry the trace too
    records = await read_records(cluster.bootstrap, [Topics(cluster.prefix).chunks("res-1", thread)])
    parents = {dict(r.headers).get("traceparent", b"").decode() for r in records}
    assert parents and all(p.split("-")[1] == trace_id[2:] for p in parents), parents
