"""Case B08 (docs/cases.md): text before or after a tool call, whitespace-only or empty text, and a
call streamed without arguments never end the run early — on both stream paths (the direct
provider stream and litellm's wrapper, the harness switch; docs/decisions.md §20, §22)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.helpers import rows, run_row, run_stream
from tests.e2e.stream_paths import PATHS, delta, on_path, raw
from threadline.testing import model_script as ms

MODEL = "threadline-b08"
LOOKUP = {"index": 0, "id": "t1", "type": "function", "function": {"name": "lookup", "arguments": '{"id":"C-1"}'}}


def _ping(function: dict[str, Any]) -> dict[str, Any]:
    return raw(delta({"role": "assistant", "tool_calls": [
        {"index": 0, "id": "t1", "type": "function", "function": {"name": "ping", **function}}]}),
        delta({}, "tool_calls"))


VARIANTS: dict[str, dict[str, Any]] = {
    "a": raw(delta({"role": "assistant", "content": "Let me check that."}), delta({"tool_calls": [LOOKUP]}),
             delta({}, "tool_calls")),
    "b": raw(delta({"role": "assistant", "content": "\n\n"}), delta({"tool_calls": [LOOKUP]}),
             delta({}, "tool_calls")),
    "c": raw(delta({"role": "assistant", "content": ""}), delta({"content": ""}), delta({"tool_calls": [LOOKUP]}),
             delta({}, "tool_calls")),
    "d": _ping({"arguments": ""}),
    "d2": _ping({"arguments": None}),
    "d3": _ping({}),
    "d4": _ping({"arguments": "{}"}),
    "e": raw(delta({"role": "assistant", "tool_calls": [LOOKUP]}), delta({"content": "…checking"}),
             delta({}, "tool_calls")),
}
STEP0_TEXT = {"a": "Let me check that.", "b": "\n\n", "e": "…checking"}
"""The text step 0 streamed, as stored (§22: whitespace-only text is kept verbatim)."""


@pytest.fixture(scope="module", params=sorted(PATHS))
def path(request, services):
    with on_path(services, request.param, "processor_worker-b08-wrapper") as chosen:
        yield chosen


@pytest.mark.parametrize("variant", sorted(VARIANTS))
async def test_b08_text_and_calls_without_arguments_run_the_tool(path, services, settings, model, cluster,
                                                                 variant):
    model.clear(model=MODEL)
    model.queue([VARIANTS[variant], ms.text("C-1 is on Pro.")], model=MODEL)
    run_id, chunks = await run_stream(settings, "B08", "Which plan is C-1 on?")
    tool = "ping" if variant.startswith("d") else "lookup"
    results = [c["payload"] for c in chunks if c["type"] == "tool-result"]
    assert [r["toolName"] for r in results] == [tool], [c["type"] for c in chunks]  # the tool ran exactly once
    assert not any(c["type"] == "tool-error" for c in chunks)
    if tool == "ping":
        assert results[0]["args"] == {}  # executed with {} (no "invalid arguments")
    else:
        assert results[0]["result"] == {"id": "C-1", "plan": "Pro"}
    finishes = [c["payload"] for c in chunks if c["type"] == "step-finish"]
    # rawReason (the provider's own) varies with the shape: not compared here
    assert [{k: f["stepResult"][k] for k in ("reason", "isContinued")} for f in finishes] == [
        {"reason": "tool-calls", "isContinued": True}, {"reason": "stop", "isContinued": False}]
    assert finishes[-1]["output"]["text"] == "C-1 is on Pro."  # the run's last text
    requests = model.requests(model=MODEL)
    assert len(requests) == 2
    assert chunks[-1]["type"] == "finish" and chunks[-1]["payload"]["finishReason"] == "stop"
    assert "" not in [c["payload"]["text"] for c in chunks if c["type"] == "text-delta"]  # empty content is no text
    # FM pairing validator (helper C): its count is asserted suite-wide once it exists

    sent = requests[1]["body"]["messages"]
    calls_at = next(i for i, m in enumerate(sent) if m["role"] == "assistant" and m.get("tool_calls"))
    assert [c["id"] for c in sent[calls_at]["tool_calls"]] == ["t1"]
    assert sent[calls_at + 1]["role"] == "tool" and sent[calls_at + 1]["tool_call_id"] == "t1"
    if variant in ("a", "e"):
        assert STEP0_TEXT[variant] in str(sent[calls_at].get("content"))

    await run_row(cluster.dsn, run_id)
    stored = await rows(cluster.dsn, "SELECT content FROM messages WHERE run_id = $1 AND role = 'assistant' "
                                     "ORDER BY position", run_id)
    parts = [p for m in stored for p in m["content"]["parts"] if p["type"] in ("text", "tool-invocation")]
    assert all(p["text"] for p in parts if p["type"] == "text")  # no empty text part is stored
    view = [p["text"] if p["type"] == "text" else (p["toolInvocation"]["toolCallId"], p["toolInvocation"]["state"])
            for p in parts]
    final = "C-1 is on Pro."
    if variant == "e":  # the order streamed: the invocation, then the text
        assert view == [("t1", "result"), STEP0_TEXT["e"], final]
    elif variant in STEP0_TEXT:
        assert view == [STEP0_TEXT[variant], ("t1", "result"), final]
    else:
        assert view == [("t1", "result"), final]
