"""B03: a retry of a later step (an error processor's retry, a mid-stream failure, a failed run
followed by a new message, a worker crash) re-runs only the failed model call — never step 0's
model request, its tool, or its streamed chunks."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tests.e2e.helpers import collect_run, content, execute, own_instances, rows, run_row, run_stream, wait_idle
from tests.e2e.helpers import kept_chunks as kept
from threadline.client import ThreadlineClient
from threadline.testing import model_script as ms

FM = "threadline-b03"
CHARGE = ms.tool_calls(ms.tool_call("charge", {"amount": 5}, id="k1"))


async def _charges(dsn: str, run_ids: list[str]) -> tuple[int, int]:
    """(entries into ``charge``, charges made) for these runs."""
    found = await rows(dsn, "SELECT kind FROM b03_charges WHERE run_id = ANY($1::text[])", run_ids)
    return sum(r["kind"] == "entered" for r in found), sum(r["kind"] == "charged" for r in found)


async def _table(dsn: str) -> None:
    await execute(dsn, "CREATE TABLE IF NOT EXISTS b03_charges (run_id text, tool_call_id text, kind text, amount int)")


def _text(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["payload"]["text"] for c in chunks if c["type"] == "text-delta")


async def _assistant_rows(dsn: str, thread: str) -> list[Any]:
    return await rows(dsn, "SELECT id, role, content FROM messages WHERE thread_id = $1 AND role = 'assistant' "
                           "ORDER BY position", thread)


def _parts(stored: list[Any], kind: str) -> list[dict[str, Any]]:
    return [p for r in stored for p in r["content"]["parts"] if p["type"] == kind]


def _assert_scoped_stream(chunks: list[dict[str, Any]]) -> None:
    """One ``tool-call k1``, one ``tool-result k1``, ``step-finish {tool-calls}``, "Charged." → finish stop."""
    view = kept(chunks)
    calls = [c for c in view if c["type"] == "tool-call"]
    results = [c for c in view if c["type"] == "tool-result"]
    assert [c["payload"]["toolCallId"] for c in calls] == ["k1"]
    assert [c["payload"]["toolCallId"] for c in results] == ["k1"]
    finishes = [c["payload"]["stepResult"]["reason"] for c in view if c["type"] == "step-finish"]
    assert finishes == ["tool-calls", "stop"]
    assert _text(view) == "Charged."
    assert content(view)[-1] == ("finish", "stop")
    # step 0's chunks were streamed once: no chunk of step 0 after step 1 began
    step1_at = next(i for i, c in enumerate(chunks) if c["step"] == 1)
    assert all(c["step"] == 1 for c in chunks[step1_at:] if c["type"] != "finish")


async def _retried_case(services, settings, model, cluster, second: ms.Script) -> tuple[str, str, list[dict[str, Any]]]:
    await _table(cluster.dsn)
    thread = f"th-b03-{uuid.uuid4().hex[:6]}"
    model.queue([CHARGE, second, ms.text("Charged.")], model=FM)
    run_id, chunks = await run_stream(settings, "b03", "charge 5", thread=thread)
    requests = model.requests(model=FM)
    assert len(requests) == 3
    assert requests[2]["body"]["messages"] == requests[1]["body"]["messages"]  # the retry resends the same list
    sent = requests[1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == ["k1"] and sent[2]["tool_call_id"] == "k1"
    assert len(requests[0]["body"]["messages"]) == 1  # step 0 asked once, with the user message only
    assert await _charges(cluster.dsn, [run_id]) == (1, 1)
    _assert_scoped_stream(chunks)
    row = await run_row(cluster.dsn, run_id)
    assert row["status"] == "finished"
    assert row["state"]["processor_state"]["r1"]["seen"][0]["retry_count"] == 0
    assert await wait_idle(cluster.dsn, thread)
    return run_id, thread, chunks


async def test_b03a_retry_after_an_http_error_asks_step_1_again_only(services, settings, model, cluster):
    await _retried_case(services, settings, model, cluster, ms.error(500))


async def test_b03b_retry_after_a_mid_stream_disconnect_discards_the_partial_text(services, settings, model, cluster):
    _, thread, chunks = await _retried_case(services, settings, model, cluster,
                                            ms.text("Char", fail="disconnect", fail_after=1))
    marks = [c for c in chunks if c["type"] == "attempt-discarded"]
    assert [(m["payload"]["step"], m["payload"]["attempt"]) for m in marks] == [(1, 1)]
    at = chunks.index(marks[0])
    assert _text([c for c in chunks[:at] if c["step"] == 1]) == "Char"  # the dead attempt streamed "Char"
    stored = await _assistant_rows(cluster.dsn, thread)
    assert len(stored) == 1
    assert "".join(p["text"] for p in _parts(stored, "text")) == "Charged."
    invocations = _parts(stored, "tool-invocation")
    assert [(p["toolInvocation"]["toolCallId"], p["toolInvocation"]["state"]) for p in invocations] == [("k1", "result")]


async def test_b03c_a_failed_run_keeps_the_charge_and_the_next_run_does_not_repeat_it(services, settings, model, cluster):
    await _table(cluster.dsn)
    fm = "threadline-b03-plain"
    thread = f"th-b03-{uuid.uuid4().hex[:6]}"
    model.queue([CHARGE, ms.error(500), ms.text("Charged earlier.")], model=fm)
    run1, chunks1 = await run_stream(settings, "b03-plain", "charge 5", thread=thread)
    assert content(chunks1)[-2][0] == "error" and content(chunks1)[-1] == ("finish", "error")
    assert (await run_row(cluster.dsn, run1))["status"] == "failed"
    assert await wait_idle(cluster.dsn, thread)
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        sent = await tl.send_message("try again", agent_id="b03-plain", resource_id="res-1", thread_id=thread)
        run2 = (await sent.accepted).run_id
        chunks2 = await collect_run(sub, timeout_s=60)
        await sub.unsubscribe()
    assert run2 != run1
    assert content(chunks2)[-1] == ("finish", "stop") and _text(chunks2) == "Charged earlier."
    assert not any(c["type"] in ("tool-call", "tool-result") for c in chunks2)  # run 2 executes no tool
    requests = model.requests(model=fm)
    assert len(requests) == 3
    history = requests[2]["body"]["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "user"]
    assert [c["id"] for c in history[1]["tool_calls"]] == ["k1"] and history[2]["tool_call_id"] == "k1"
    assert history[3]["content"] in ("try again", [{"type": "text", "text": "try again"}])
    assert await _charges(cluster.dsn, [run1, run2]) == (1, 1)
    assert await wait_idle(cluster.dsn, thread)


async def test_b03d_step_1_re_executed_after_a_crash_does_not_repeat_step_0(services, settings, model, cluster):
    await _table(cluster.dsn)
    thread = f"th-b03-{uuid.uuid4().hex[:6]}"
    slow = ms.Script(chunks=[f"w{i} " for i in range(10)], chunk_delay=1)
    model.queue([CHARGE, slow, ms.text("Charged.")], model=FM)
    # the single armed worker runs both steps
    with own_instances(services, "processor_worker", "processor_worker-1", kill=True) as own:
        own.append("processor_worker-b03")
        services.start("processor_worker", "processor_worker-b03")
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            run_id = (await (await tl.stream("charge 5", agent_id="b03", resource_id="res-1",
                                             thread_id=thread)).accepted).run_id
            seen: list[dict[str, Any]] = []

            async def third_delta_of_step_1() -> None:
                async for c in sub.stream:
                    seen.append(c)
                    if sum(x["type"] == "text-delta" and x["step"] == 1 for x in seen) == 3:
                        return

            await asyncio.wait_for(third_delta_of_step_1(), 60)
            services.kill("processor_worker-b03")  # kill -9 mid-stream, then a worker to re-execute the step
            services.start("processor_worker", "processor_worker-1")
            seen += await collect_run(sub, timeout_s=120)
            await sub.unsubscribe()
    requests = model.requests(model=FM)
    assert len(requests) == 3 and len(requests[0]["body"]["messages"]) == 1  # no second request for step 0
    assert requests[2]["body"]["messages"] == requests[1]["body"]["messages"]
    marks = [c for c in seen if c["type"] == "attempt-discarded"]
    assert [(m["payload"]["step"], m["payload"]["attempt"]) for m in marks] == [(1, 1)]
    assert all(c["attempt"] == 2 for c in seen[seen.index(marks[0]) + 1:] if c["step"] == 1)  # re-executed as attempt 2
    assert len([c for c in kept(seen) if c["type"] == "tool-result"]) == 1
    assert _text(kept(seen)) == "Charged." and content(seen)[-1] == ("finish", "stop")
    assert await _charges(cluster.dsn, [run_id]) == (1, 1)
    assert (await run_row(cluster.dsn, run_id))["attempt"] == 2
    assert await wait_idle(cluster.dsn, thread)
