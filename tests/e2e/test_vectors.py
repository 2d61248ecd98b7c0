"""Chunk and memory vectors (docs/cases.md: C1, C2, C5, C8, M1, M2, P29), adapted per
docs/decisions.md (the stream also carries the message echo and a finish after every ending)."""

from __future__ import annotations

from tests.e2e.helpers import rows, run_row, run_stream
from threadline.testing import model_script as ms


async def test_c1_m1_text_run_chunk_order_and_stored_messages(services, settings, model, cluster):
    model.queue([ms.text("hello there")], model="threadline-plain")
    run_id, chunks = await run_stream(settings, "plain", "hi")
    types = [c["type"] for c in chunks]
    assert types[:4] == ["start", "data-user-message", "step-start", "text-start"]
    assert types[-3:] == ["text-end", "step-finish", "finish"]
    assert set(types[4:-3]) == {"text-delta"}
    start = chunks[0]["payload"]
    assert start["id"] == "plain" and chunks[2]["payload"]["messageId"] == start["messageId"]
    assert isinstance(chunks[2]["payload"]["startedAt"], int)
    await run_row(cluster.dsn, run_id)  # stored with the run's last step, just after its finish chunk
    stored = await rows(cluster.dsn, "SELECT id, role FROM messages WHERE run_id = $1 ORDER BY position", run_id)
    assert [r["role"] for r in stored] == ["user", "assistant"] and stored[1]["id"] == start["messageId"]


async def test_c5_provider_400_without_error_processors(services, settings, model, cluster):
    model.queue([{"status": 400, "error": {"message": "bad request body"}}], model="threadline-plain")
    run_id, chunks = await run_stream(settings, "plain", "hi")
    types = [c["type"] for c in chunks]
    assert types[-3:] == ["error", "step-finish", "finish"]
    assert chunks[-3]["payload"]["error"]["kind"] == "bad_request"
    assert chunks[-2]["payload"]["stepResult"]["reason"] == "error"
    assert (await run_row(cluster.dsn, run_id))["status"] == "failed"


async def test_p29_c8_cached_response_replayed_through_output_processors(services, settings, model, cluster):
    run_id, chunks = await run_stream(settings, "cached", "hi")
    assert model.requests(model="threadline-cached") == []
    step_start = next(c for c in chunks if c["type"] == "step-start")
    assert "startedAt" not in step_start["payload"]
    text = "".join(c["payload"]["text"] for c in chunks if c["type"] == "text-delta")
    assert text == "CACHED ANSWER"  # replayed chunks went through process_output_stream (docs/decisions.md#cached-responses)
    run = await run_row(cluster.dsn, run_id)
    # as in Mastra, process_llm_response is not called after a cached reply (docs/decisions.md#cached-responses)
    assert "from_cache" not in run["state"]["processor_state"].get("cache", {}) and run["text"] == "CACHED ANSWER"


async def test_c2_m2_tool_round_and_one_assistant_message(services, settings, model, cluster):
    model.queue([ms.tool_calls(ms.tool_call("lookup_customer", {"customer_id": "C-1002"})), ms.text("Free plan.")],
                model="threadline-fake")
    run_id, chunks = await run_stream(settings, "support-agent", "C-1002?")
    types = [c["type"] for c in chunks]
    assert types.index("tool-result") < types.index("step-finish")
    finishes = [c["payload"]["stepResult"] for c in chunks if c["type"] == "step-finish"]
    assert finishes == [{"reason": "tool-calls", "rawReason": "tool_calls", "isContinued": True},
                        {"reason": "stop", "rawReason": "stop", "isContinued": False}]
    await run_row(cluster.dsn, run_id)
    stored = await rows(cluster.dsn, "SELECT role, content FROM messages WHERE run_id = $1 ORDER BY position", run_id)
    assert [r["role"] for r in stored] == ["user", "assistant"]
    # as Mastra stores it: a step-start before each later step of the message, none before the first
    assert [p["type"] for p in stored[1]["content"]["parts"]].count("step-start") == 1


async def test_a_step_that_cannot_run_fails_its_run_instead_of_orphaning_it(services, settings, model, cluster):
    run_id, chunks = await run_stream(settings, "broken", "hi")
    assert [c["type"] for c in chunks][-2:] == ["error", "finish"]
    assert "instructions exploded" in chunks[-2]["payload"]["error"]["message"]
    run = await run_row(cluster.dsn, run_id)
    assert run["status"] == "failed"
    lease = await rows(cluster.dsn, "SELECT l.run_id FROM thread_leases l JOIN runs r USING (thread_id) "
                       "WHERE r.run_id = $1", run_id)
    for _ in range(50):
        if lease[0]["run_id"] is None:
            break
        import asyncio

        await asyncio.sleep(0.1)
        lease = await rows(cluster.dsn, "SELECT l.run_id FROM thread_leases l JOIN runs r USING (thread_id) "
                           "WHERE r.run_id = $1", run_id)
    assert lease[0]["run_id"] is None  # the thread is idle again
    n = await rows(cluster.dsn, "SELECT count(*) AS n FROM runs WHERE thread_id = (SELECT thread_id FROM runs "
                   "WHERE run_id = $1)", run_id)
    assert n[0]["n"] == 1  # the failed input did not wake run after run
