"""Tool payload transforms (decision 72). A tool's own rule and the agent's
policy shape its input and output on the stream (``display``) and in the stored transcript
(``transcript``); the model gets the raw payloads."""

from __future__ import annotations

import json
import uuid

from tests.e2e.helpers import rows
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms

RES = "res-transform"


async def test_display_and_transcript_transforms(services, settings, model, cluster):
    thread = f"th-tf-{uuid.uuid4().hex[:8]}"
    await model.aqueue([ms.tool_calls(ms.tool_call("lookup_customer", {"customer_id": "c1", "secret": "s3cr3t"},
                                                   id="call-1"),
                                      ms.tool_call("audit", {"note": "looked up c1"}, id="call-2")),
                        ms.text("Acme it is.")], model="threadline-transforming")
    async with ThreadlineClient(settings) as tl:
        out = await tl.agent("transforming").stream("who is c1?", {"memory": {"resource": RES, "thread": thread}})
        chunks = await out.consume_stream(timeout_s=30)
    streamed = json.dumps(chunks)
    assert "s3cr3t" not in streamed and "key-of" not in streamed  # deltas of a covered tool are suppressed too
    by_type = {(c["type"], c["payload"].get("toolCallId")): c["payload"] for c in chunks
               if c["type"] in ("tool-call", "tool-result")}
    assert by_type[("tool-call", "call-1")]["args"] == {"customer_id": "c1"}
    assert by_type[("tool-result", "call-1")]["result"] == {"display_name": "Acme"}
    # the agent's policy covers the transcript only: audit's payloads stream raw
    assert by_type[("tool-call", "call-2")]["args"] == {"note": "looked up c1"}
    assert by_type[("tool-result", "call-2")]["result"] == {"stored": "looked up c1"}
    assert any(c["type"] == "tool-call-delta" and c["payload"]["toolCallId"] == "call-2" for c in chunks)
    # the model was given the raw payloads
    second = (await model.arequests(model="threadline-transforming"))[-1]["body"]["messages"]
    tool_msgs = {m["tool_call_id"]: m["content"] for m in second if m["role"] == "tool"}
    assert json.loads(tool_msgs["call-1"]) == {"display_name": "Acme", "api_key": "key-of-s3cr3t"}
    called = [c for m in second if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert json.loads(called[0]["function"]["arguments"]) == {"customer_id": "c1", "secret": "s3cr3t"}
    # the stored transcript, as each rule says
    stored = await rows(cluster.dsn, "SELECT content FROM messages WHERE thread_id = $1 ORDER BY position", thread)
    invocations = {p["toolInvocation"]["toolCallId"]: p["toolInvocation"] for r in stored
                   for p in r["content"]["parts"] if p.get("type") == "tool-invocation"}
    assert invocations["call-1"]["args"] == {"customer_id": "c1"}
    assert invocations["call-1"]["result"] == {"message": "Tool output-available payload unavailable"}
    assert invocations["call-2"]["args"] == {"redacted": "input-available"}
    assert invocations["call-2"]["result"] == {"redacted": "output-available"}
    assert "s3cr3t" not in json.dumps([r["content"] for r in stored])
