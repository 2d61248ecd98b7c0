"""The main job end to end: ingress → orchestrator → worker (processors, model, tool) → the
thread's chunk topic, and the thread stored in Postgres."""

from __future__ import annotations

import uuid

from tests.e2e.helpers import collect_run, rows, run_row, wait_idle
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms


async def test_send_message_wakes_a_run_that_streams_and_stores_the_thread(services, settings, model, cluster):
    thread, resource = f"th-{uuid.uuid4().hex[:8]}", "res-1"
    model.queue([ms.tool_calls(ms.tool_call("lookup_customer", {"customer_id": "C-1001"})),
                 ms.text("Ada is on the pro plan with two open tickets.")], model="threadline-fake")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread(resource, thread)
        sent = await tl.send_message("How is customer C-1001 doing?", agent_id="support-agent",
                                     resource_id=resource, thread_id=thread)
        accepted = await sent.accepted
        assert accepted.action == "wake" and accepted.run_id
        chunks = await collect_run(sub)
        await sub.unsubscribe()

    types = [c["type"] for c in chunks]
    assert types[0] == "start" and types[1] == "data-user-message"
    assert {c["runId"] for c in chunks} == {accepted.run_id}
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))
    assert "tool-call" in types and types.index("tool-call") < types.index("tool-result")
    result = next(c for c in chunks if c["type"] == "tool-result")
    assert result["payload"]["result"]["name"] == "Ada Lovelace"
    step_finishes = [c for c in chunks if c["type"] == "step-finish"]
    assert [s["payload"]["stepResult"] for s in step_finishes] == [
        {"reason": "tool-calls", "rawReason": "tool_calls", "isContinued": True},
        {"reason": "stop", "rawReason": "stop", "isContinued": False}]
    # the model that answered, as Mastra's step-finish metadata has it (the demo prints it)
    assert [s["payload"]["metadata"]["modelMetadata"] for s in step_finishes] == [
        {"modelId": "threadline-fake", "modelVersion": "v3", "modelProvider": "openai.chat"}] * 2
    text = "".join(c["payload"]["text"] for c in chunks if c["type"] == "text-delta")
    assert text == "Ada is on the pro plan with two open tickets."
    assert types[-3:] == ["data-word-count", "step-finish", "finish"]  # written at finish, before step-finish (Mastra)
    assert chunks[-3]["data"] == {"words": 10}
    assert chunks[-1]["payload"]["finishReason"] == "stop"
    # the model's second request carried the tool result
    second = model.requests(model="threadline-fake")[1]["body"]["messages"]
    assert any(m["role"] == "tool" and "Ada Lovelace" in m["content"] for m in second)

    await run_row(cluster.dsn, accepted.run_id)  # stored with the last step, just after the finish chunk
    stored = await rows(cluster.dsn, "SELECT role, content FROM messages WHERE thread_id = $1 ORDER BY position", thread)
    assert [r["role"] for r in stored] == ["signal", "assistant"]  # a sendMessage: Mastra's role signal
    parts = stored[1]["content"]["parts"]
    kinds = [p["type"] for p in parts]
    # as Mastra stores it: only the second step starts with a step-start
    assert kinds.count("step-start") == 1 and "tool-invocation" in kinds and "data-word-count" in kinds
    inv = next(p for p in parts if p["type"] == "tool-invocation")["toolInvocation"]
    assert inv["state"] == "result" and inv["result"]["plan"] == "pro"
    run = (await rows(cluster.dsn, "SELECT status, finish_reason, text FROM runs WHERE run_id = $1", accepted.run_id))[0]
    assert (run["status"], run["finish_reason"]) == ("finished", "stop")
    assert await wait_idle(cluster.dsn, thread)  # the lease was released: the thread is idle
    assert all(services.alive().values())


async def test_blocked_word_is_a_tripwire_with_no_model_call(services, settings, model, cluster):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        sent = await tl.send_message("my password is hunter2", agent_id="support-agent",
                                     resource_id="res-1", thread_id=thread)
        await sent.accepted
        chunks = await collect_run(sub)
        await sub.unsubscribe()
    trip = next(c for c in chunks if c["type"] == "tripwire")
    assert trip["payload"] == {"reason": "Blocked word in input: password", "retry": False,
                               "metadata": {"word": "password"}, "processorId": "blocked-words"}
    assert chunks[-1]["type"] == "finish" and chunks[-1]["payload"]["finishReason"] == "other"
    assert model.requests(model="threadline-fake") == []
    await run_row(cluster.dsn, (await rows(cluster.dsn, "SELECT run_id FROM runs WHERE thread_id = $1", thread))[0]["run_id"])
    run = (await rows(cluster.dsn, "SELECT status, tripwire_processor_id FROM runs WHERE thread_id = $1", thread))[0]
    assert (run["status"], run["tripwire_processor_id"]) == ("tripwire", "blocked-words")


async def test_generate_replies_with_the_result_and_updates_the_thread_row(services, settings, model, cluster):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    model.queue([ms.text("Four.", usage={"prompt_tokens": 42, "completion_tokens": 17})], model="threadline-fake")
    async with ThreadlineClient(settings) as tl:
        result = await tl.generate("What is 2 + 2?", agent_id="support-agent", resource_id="res-1",
                                   thread_id=thread, thread={"title": "Maths", "metadata": {"topic": "sums"}},
                                   timeout_s=60)
    assert (result.text, result.finish_reason) == ("Four.", "stop")
    assert result.usage["inputTokens"] == 42 and result.usage["outputTokens"] == 17
    assert result.tripwire is None and len(result.steps) == 1
    row = (await rows(cluster.dsn, "SELECT resource_id, title, metadata FROM threads WHERE thread_id = $1", thread))[0]
    assert (row["resource_id"], row["title"], row["metadata"]) == ("res-1", "Maths", {"topic": "sums"})


async def test_a_thread_of_another_resource_is_rejected(services, settings, model):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    async with ThreadlineClient(settings) as tl:
        first = await tl.send_message("hi", agent_id="echo-agent", resource_id="owner", thread_id=thread)
        assert (await first.accepted).action == "wake"
        other = await tl.send_message("let me in", agent_id="echo-agent", resource_id="intruder", thread_id=thread)
        try:
            await other.accepted
        except Exception as exc:  # noqa: BLE001 - whatever the refusal raised, its code is checked below
            assert getattr(exc, "code", None) == "thread_owned_by_other_resource"
        else:
            raise AssertionError("a foreign resource was let into the thread")
