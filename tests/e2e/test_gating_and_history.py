"""Cases C09 (input filtering never rewrites history), C10 (gates run before side effects) and
C13 (a tool-call step that the provider ends with "stop"; usage late or missing)."""

from __future__ import annotations

import uuid

from tests.e2e.helpers import content, execute, rows, run_row, run_stream
from threadline.testing import model_script as ms


async def test_c09_input_filtering_does_not_rewrite_stored_history(services, settings, model, cluster):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    await execute(cluster.dsn, "INSERT INTO threads (thread_id, resource_id) VALUES ($1, 'res-1')", thread)
    earlier = [
        ("m1", "user", {"format": 2, "parts": [{"type": "text", "text": "weather?"}]}),
        ("m2", "assistant", {"format": 2, "parts": [{"type": "step-start"}, {"type": "tool-invocation", "toolInvocation": {
            "state": "result", "toolCallId": "w1", "toolName": "get_weather", "args": {"city": "Oslo"},
            "result": {"t": 3}}}]}),
        ("m3", "assistant", {"format": 2, "parts": [{"type": "text", "text": "3°C"}]}),
        ("m4", "user", {"format": 2, "parts": [{"type": "text", "text": "ok"}]}),
    ]
    for mid, role, body in earlier:
        import orjson

        await execute(cluster.dsn, "INSERT INTO messages (id, thread_id, resource_id, role, content) "
                    "VALUES ($1, $2, 'res-1', $3, $4::jsonb)", f"{thread}-{mid}", thread, role, orjson.dumps(body).decode())
    snapshot = await rows(cluster.dsn, "SELECT id, content::text AS c, updated_at, position FROM messages "
                          "WHERE thread_id = $1 ORDER BY position", thread)
    model.queue([ms.text("You're welcome.")], model="threadline-history-filter")
    run_id, _ = await run_stream(settings, "history-filter", "thanks", thread=thread)
    await run_row(cluster.dsn, run_id)
    sent = model.requests(model="threadline-history-filter")[0]["body"]["messages"]
    assert not any(m.get("tool_calls") or m["role"] == "tool" for m in sent)
    after = await rows(cluster.dsn, "SELECT id, content::text AS c, updated_at, position FROM messages "
                       "WHERE thread_id = $1 ORDER BY position", thread)
    assert [tuple(r) for r in after[:4]] == [tuple(r) for r in snapshot]
    assert len(after) == 4 + 2


async def test_c10a_slow_input_gate_blocks_before_any_model_call(services, settings, model, cluster):
    model.queue([ms.tool_calls(ms.tool_call("send_email", {"to": "x"}))], model="threadline-gated-mailer")
    run_id, chunks = await run_stream(settings, "input-gated-mailer", "email x")
    assert model.requests(model="threadline-gated-mailer") == []
    assert not any(c["type"] == "tool-call" for c in chunks)
    assert content(chunks)[-2:] == [("tripwire", {"reason": "blocked topic", "retry": False, "metadata": None,
                                                  "processorId": "slowgate"}), ("finish", "tripwire")]
    await execute(cluster.dsn, "CREATE TABLE IF NOT EXISTS sent_emails (run_id text, recipient text)")
    await execute(cluster.dsn, "CREATE TABLE IF NOT EXISTS hook_calls (tool text)")
    assert await rows(cluster.dsn, "SELECT * FROM sent_emails WHERE run_id = $1", run_id) == []
    model.reset()


async def test_c10b_step_gate_blocks_the_tool_the_model_already_called(services, settings, model, cluster):
    await execute(cluster.dsn, "CREATE TABLE IF NOT EXISTS sent_emails (run_id text, recipient text)")
    await execute(cluster.dsn, "CREATE TABLE IF NOT EXISTS hook_calls (tool text)")
    before_hooks = len(await rows(cluster.dsn, "SELECT * FROM hook_calls"))
    model.queue([ms.tool_calls(ms.tool_call("send_email", {"to": "x"}))], model="threadline-gated-mailer")
    run_id, chunks = await run_stream(settings, "step-gated-mailer", "email x")
    await run_row(cluster.dsn, run_id)
    assert len(model.requests(model="threadline-gated-mailer")) == 1
    types = [c["type"] for c in chunks]
    assert "tool-call" in types and "tool-result" not in types
    assert content(chunks)[-2:] == [("tripwire", {"reason": "no emails", "retry": False, "metadata": None,
                                                  "processorId": "stepgate"}), ("finish", "tripwire")]
    assert await rows(cluster.dsn, "SELECT * FROM sent_emails WHERE run_id = $1", run_id) == []
    assert len(await rows(cluster.dsn, "SELECT * FROM hook_calls")) == before_hooks
    stored = await rows(cluster.dsn, "SELECT content::text AS c FROM messages WHERE run_id = $1", run_id)
    assert not any("send_email" in r["c"] for r in stored)


async def test_c13_tool_calls_ending_with_stop_still_run_the_tool(services, settings, model, cluster):
    model.queue([
        {"tool_calls": [{"id": "t1", "name": "add", "arguments": '{"a":2,"b":3}'}], "finish_reason": "stop",
         "usage": {"prompt_tokens": 40, "completion_tokens": 9}},
        {"text": "5", "usage": None},
    ], model="threadline-adder")
    run_id, chunks = await run_stream(settings, "adder", "2+3?")
    assert len(model.requests(model="threadline-adder")) == 2
    finishes = [c for c in chunks if c["type"] == "step-finish"]
    assert finishes[0]["payload"]["stepResult"]["reason"] == "tool-calls"
    usage = finishes[0]["payload"]["output"]["usage"]
    assert usage.pop("raw")["raw"] == {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}  # as sent
    assert usage == {"inputTokens": 40, "outputTokens": 9, "totalTokens": 49, "cachedInputTokens": 0,
                     "reasoningTokens": 0}
    assert finishes[1]["payload"]["output"]["usage"] is None  # unknown, not 0
    result = next(c for c in chunks if c["type"] == "tool-result")
    assert result["payload"]["result"] == 5
    assert chunks[-1]["payload"]["finishReason"] == "stop"
    run = await run_row(cluster.dsn, run_id)
    assert run["text"] == "5" and run["usage"]["partial"] is True and run["usage"]["inputTokens"] == 40
