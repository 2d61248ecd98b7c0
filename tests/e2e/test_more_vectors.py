"""More vectors (docs/cases.md) end to end: P6, P9, P18–P20, P23, P30, P33, P38, P43,
M3, M5–M7 (adapted per docs/decisions.md)."""

from __future__ import annotations

import uuid

from tests.e2e.helpers import collect_run, content, rows, run_row, run_stream
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms


async def test_p18_p19_p20_m5_data_parts_from_tools(services, settings, model, cluster):
    model.queue([ms.tool_calls(ms.tool_call("data_tool", {"n": 1})), ms.text("ok")], model="threadline-data")
    run_id, chunks = await run_stream(settings, "data-agent", "go")
    data = [(c["type"], c.get("data")) for c in chunks if c["type"].startswith("data-") and c["type"] != "data-user-message"]
    assert data == [("data-progress", {"p": 1}), ("data-note", 1)]  # data-secret dropped by the opted-in processor
    await run_row(cluster.dsn, run_id)
    stored = await rows(cluster.dsn, "SELECT content FROM messages WHERE run_id = $1 AND role = 'assistant'", run_id)
    parts = [p for p in stored[0]["content"]["parts"] if p["type"].startswith("data-")]
    assert isinstance(parts[0].pop("createdAt"), int)  # stamped (epoch ms), as Mastra stamps parts
    assert parts == [{"type": "data-progress", "data": {"p": 1}}]  # the transient note and the dropped secret are not stored


async def test_p30_prompt_edits_reach_only_the_provider(services, settings, model, cluster):
    model.queue([ms.text("fine")], model="threadline-prompt")
    run_id, _ = await run_stream(settings, "prompt-agent", "SECRET-CONTEXT")
    sent = model.requests(model="threadline-prompt")[0]["body"]["messages"]
    assert not any(m.get("content") == "SECRET-CONTEXT" for m in sent)
    await run_row(cluster.dsn, run_id)
    stored = await rows(cluster.dsn, "SELECT content::text AS c FROM messages WHERE run_id = $1 AND role = 'user'", run_id)
    assert "SECRET-CONTEXT" in stored[0]["c"]  # the stored conversation is unchanged


async def test_p6_m7_system_messages_reset_each_step_and_never_stored(services, settings, model, cluster):
    model.queue([ms.tool_calls(ms.tool_call("tool_a", {})), ms.text("end")], model="threadline-system")
    run_id, _ = await run_stream(settings, "system-agent", "hi")
    first, second = (r["body"]["messages"] for r in model.requests(model="threadline-system"))
    systems = lambda msgs: [m["content"] for m in msgs if m["role"] == "system"]  # noqa: E731 - a one-line helper read next to its asserts
    assert systems(first) == ["STEP ZERO ONLY"]
    assert systems(second) == ["ORIGINAL", "added by process_input"]
    await run_row(cluster.dsn, run_id)
    stored = await rows(cluster.dsn, "SELECT role, content::text AS c FROM messages WHERE run_id = $1", run_id)
    assert "system" not in [r["role"] for r in stored] and not any("ORIGINAL" in r["c"] for r in stored)


async def test_p9_prepare_step_runs_after_the_processors(services, settings, model, cluster):
    model.queue([ms.text("x")], model="threadline-active")
    await run_stream(settings, "active-agent", "hi")
    offered = [t["function"]["name"] for t in model.requests(model="threadline-active")[0]["body"]["tools"]]
    assert offered == ["tool_b"]


async def test_p33_abort_on_one_tool_result_ends_the_run_unstored(services, settings, model, cluster):
    model.queue([ms.tool_calls(ms.tool_call("tool_a", {}, id="t1"), ms.tool_call("tool_a", {}, id="t2"))],
                model="threadline-tool-result-gate")
    run_id, chunks = await run_stream(settings, "tool-result-gate", "go")
    assert not any(c["type"] == "tool-result" for c in chunks)
    assert content(chunks)[-2:] == [("tripwire", {"reason": "t1 result not allowed", "retry": False, "metadata": None,
                                                  "processorId": "block-t1"}), ("finish", "tripwire")]
    await run_row(cluster.dsn, run_id)
    stored = await rows(cluster.dsn, "SELECT role FROM messages WHERE run_id = $1", run_id)
    assert [r["role"] for r in stored] == []  # a tripped run stores nothing, its input neither (as Mastra)


async def test_p38_m6_output_result_abort_keeps_earlier_turns_not_its_own(services, settings, model, cluster):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    model.queue([ms.text("first answer")], model="threadline-plain")
    first_run, _ = await run_stream(settings, "plain", "first", thread=thread)
    await run_row(cluster.dsn, first_run)
    model.queue([ms.text("second answer")], model="threadline-result")
    run_id, chunks = await run_stream(settings, "result-agent", "second", thread=thread)
    assert content(chunks)[-2:] == [("tripwire", {"reason": "final answer rejected", "retry": False,
                                                  "metadata": None, "processorId": "block-result"}),
                                    ("finish", "stop")]  # the accepted step's reason, as Mastra's (decision 146)
    assert chunks[-1]["payload"]["tripwire"]["processorId"] == "block-result" and "response" not in chunks[-1]["payload"]
    run = await run_row(cluster.dsn, run_id)
    assert run["status"] == "tripwire"
    stored = await rows(cluster.dsn, "SELECT role, content::text AS c FROM messages WHERE thread_id = $1 "
                        "ORDER BY position", thread)
    assert [r["role"] for r in stored] == ["user", "assistant"]  # the tripped run's input neither, as Mastra
    assert "first answer" in stored[1]["c"] and not any("second" in r["c"] for r in stored)


async def test_p43_length_with_a_truncated_tool_call_runs_no_tool(services, settings, model, cluster):
    model.queue([{"tool_calls": [{"id": "t1", "name": "tool_a", "arguments": '{"x": '}], "finish_reason": "length"}],
                model="threadline-tool-result-gate")
    _run_id, chunks = await run_stream(settings, "tool-result-gate", "go")
    assert not any(c["type"] in ("tool-result", "tool-error") for c in chunks)
    assert [c["payload"]["stepResult"]["reason"] for c in chunks if c["type"] == "step-finish"] == ["length"]
    assert len(model.requests(model="threadline-tool-result-gate")) == 1


async def test_m3_a_message_delivered_mid_run_is_stored_between_two_assistant_messages(services, settings, model, cluster):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    model.queue([{"tool_calls": [{"id": "s1", "name": "slow", "arguments": '{"seconds": 2}'}]},
                 ms.text("saw it")], model="threadline-stateful")
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        first = await (await tl.send_message("go", agent_id="stateful", resource_id="res-1", thread_id=thread)).accepted
        async for chunk in sub.stream:
            if chunk["type"] == "tool-call":
                break
        mid = await (await tl.send_message("also this", agent_id="stateful", resource_id="res-1",
                                           thread_id=thread)).accepted
        assert (mid.action, mid.run_id) == ("deliver", first.run_id)
        chunks = await collect_run(sub)
        await sub.unsubscribe()
    echoes = [c for c in chunks if c["type"] == "data-user-message"]
    assert echoes and echoes[0]["data"]["contents"] == "also this"
    await run_row(cluster.dsn, first.run_id)
    stored = await rows(cluster.dsn, "SELECT id, role FROM messages WHERE thread_id = $1 ORDER BY position", thread)
    assert [r["role"] for r in stored] == ["signal", "assistant", "signal", "assistant"]  # sendMessage: Mastra's role
    assert stored[1]["id"] != stored[3]["id"]
    last_prompt = model.requests(model="threadline-stateful")[-1]["body"]["messages"]
    assert last_prompt[-1] == {"role": "user", "content": "also this"}


async def test_p23_cap_one_always_retry_is_two_calls_then_a_tripwire(services, settings, model, cluster):
    model.queue([ms.text("a", times=5)], model="threadline-retry-capped")
    run_id, chunks = await run_stream(settings, "retry-capped", "x")
    assert len(model.requests(model="threadline-retry-capped")) == 2
    assert content(chunks)[-2:] == [("tripwire", {"reason": "again", "retry": True, "metadata": None,
                                                  "processorId": "always-retry"}), ("finish", "tripwire")]
    assert (await run_row(cluster.dsn, run_id))["state"]["processor_state"]["always-retry"]["seen"] == [0, 1]


async def test_p34_adapted_stream_abort_with_retry_retries_the_step(services, settings, model, cluster):
    model.queue([{"chunks": ["ok ", "BAD ", "rest"]}, {"chunks": ["clean answer"]}], model="threadline-sretry")
    _run_id, chunks = await run_stream(settings, "stream-retry", "x")
    seq = content(chunks)
    assert seq[0] == ("text-delta", "ok ") and seq[1][0] == "attempt-discarded"
    assert seq[2:] == [("text-delta", "clean answer"), ("finish", "stop")]
    assert len(model.requests(model="threadline-sretry")) == 2  # the first call was stopped, not read to the end


async def test_p42_finish_other_without_output_is_an_error(services, settings, model, cluster):
    model.queue([{"chunks": [], "finish_reason": "other"}], model="threadline-plain")
    _run_id, chunks = await run_stream(settings, "plain", "x")
    assert content(chunks)[-1] == ("finish", "error")
    assert "without producing any output" in next(c for c in chunks if c["type"] == "error")["payload"]["error"]["message"]


async def test_process_tool_result_is_not_called_for_a_tool_that_raised(services, settings, model, cluster):
    model.queue([ms.tool_calls(ms.tool_call("boom", {}), ms.tool_call("fine", {})), ms.text("noted")],
                model="threadline-raising")
    run_id, chunks = await run_stream(settings, "raising", "x")
    errors = [c for c in chunks if c["type"] == "tool-error"]
    assert len(errors) == 1 and "tool broke" in errors[0]["payload"]["error"]["message"]
    assert [c["payload"]["toolName"] for c in chunks if c["type"] == "tool-result"] == ["fine"]
    run = await run_row(cluster.dsn, run_id)
    assert run["state"]["processor_state"]["recorder"]["results"] == ["fine"]
    second = model.requests(model="threadline-raising")[1]["body"]["messages"]
    assert any(m["role"] == "tool" and "tool broke" in m["content"] for m in second)  # the model is told
