"""Processor contract items end to end: retry with feedback (P21), hooks around a tool a
processor added at run time, call-level processor lists and hooks (named by id)."""

from __future__ import annotations

from tests.e2e.helpers import content, rows, run_row, run_stream
from threadline.testing import model_script as ms


async def test_p21_retry_with_feedback_then_accepted(services, settings, model, cluster):
    model.queue([{"chunks": ["meh"]}, {"chunks": ["a much longer answer"]}], model="threadline-retrying")
    run_id, chunks = await run_stream(settings, "retrying", "explain")
    requests = model.requests(model="threadline-retrying")
    assert len(requests) == 2
    messages = requests[1]["body"]["messages"]
    feedback = {"role": "system", "content": "[Processor Feedback] Your previous response was not accepted: "
                                            "too short. Please try again with the feedback in mind."}
    assert feedback in messages and messages[-1]["role"] == "user"  # Mastra's feedback, a system message
    assert not any("meh" in str(m.get("content")) for m in requests[1]["body"]["messages"])
    seq = content(chunks)
    assert seq[0] == ("text-delta", "meh") and seq[1][0] == "attempt-discarded"
    rejected = next(c for c in chunks if c["type"] == "step-finish")  # Mastra's retry marker, in the dead attempt
    assert rejected["payload"]["stepResult"]["reason"] == "retry" and rejected["attempt"] == 1
    assert rejected["payload"]["stepResult"]["retryProcessorId"] == "too-short"
    assert seq[2:] == [("text-delta", "a much longer answer"), ("finish", "stop")]
    run = await run_row(cluster.dsn, run_id)
    assert run["state"]["processor_state"]["too-short"]["retry_counts"] == [0, 1]
    stored = await rows(cluster.dsn, "SELECT content::text AS c FROM messages WHERE run_id = $1", run_id)
    assert not any("too short" in r["c"] or "meh" in r["c"] for r in stored)  # feedback and rejected text not stored


async def test_hooks_wrap_a_tool_added_by_a_processor(services, settings, model, cluster):
    model.queue([ms.tool_calls(ms.tool_call("secret_tool", {})), ms.text("done")], model="threadline-hooked")
    _run_id, chunks = await run_stream(settings, "hooked", "use it")
    assert next(c for c in chunks if c["type"] == "tool-result")["payload"]["result"] == {"ok": True}
    audit = await rows(cluster.dsn, "SELECT hook, tool FROM hook_audit WHERE tool = 'secret_tool'")
    assert len(audit) >= 1
    offered = [t["function"]["name"] for t in model.requests(model="threadline-hooked")[0]["body"]["tools"]]
    assert offered == ["secret_tool"]


async def test_call_level_processors_and_hooks_replace_the_agents(services, settings, model, cluster):
    model.queue([ms.tool_calls(ms.tool_call("secret_tool", {})), ms.text("quiet words")], model="threadline-hooked")
    _run_id, chunks = await run_stream(settings, "hooked", "use it", options={
        "output_processors": ["shout"], "hooks": "blocking"})
    result = next(c for c in chunks if c["type"] == "tool-result")["payload"]["result"]
    assert result == {"blocked": True}  # the call-level before hook short-circuited the tool
    text = "".join(c["payload"]["text"] for c in chunks if c["type"] == "text-delta")
    assert text == "QUIET WORDS"
    calls = await rows(cluster.dsn, "SELECT hook FROM hook_audit WHERE hook = 'call'")
    assert len(calls) == 1
