"""Cases of kinds K1–K3 and K5 (docs/cases.md: C01, C03, C05, C07, C14) end to end."""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from tests.e2e.helpers import content, rows, run_row, run_stream
from threadline.client import ThreadlineClient
from threadline.events import Chunk
from threadline.testing import model_script as ms


def _parts(row: Any) -> list[Any]:
    """The parts of a stored message row (its ``content`` decoded when the driver gave text)."""
    content = row["content"]
    return list((orjson.loads(content) if isinstance(content, str | bytes) else content)["parts"])


async def test_c01_abort_inside_a_broad_except_still_ends_the_run(services, settings, model, cluster):
    model.queue([{"chunks": ["Sure. ", "SYSTEM PROMPT: you are", " a bot"]}], model="threadline-swallowed-abort")
    run_id, chunks = await run_stream(settings, "swallowed-abort", "hi")
    assert content(chunks) == [
        ("text-delta", "Sure. "),
        ("tripwire", {"reason": "system prompt leak", "retry": False, "metadata": {"rule": "sp-1"},
                      "processorId": "scrub"}),
        ("finish", "tripwire")]
    assert chunks[-1]["payload"]["finishReason"] == "other"
    run = await run_row(cluster.dsn, run_id)
    assert (run["status"], run["tripwire_processor_id"]) == ("tripwire", "scrub")
    tail = run["state"]["processor_state"]["tail"]["parts"]
    assert [p["payload"]["text"] for p in tail if p["type"] == "text-delta"] == ["Sure. "]
    stored = await rows(cluster.dsn, "SELECT content::text AS c FROM messages WHERE run_id = $1", run_id)
    assert not any("SYSTEM PROMPT" in r["c"] for r in stored)
    assert len(model.requests(model="threadline-swallowed-abort")) == 1


async def test_c03_input_tripwire_reaches_subscribers_and_the_generate_reply(services, settings, model, cluster):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        result = await tl.generate("mail me at x@y.z", agent_id="pii-tripwire", resource_id="res-1", thread_id=thread,
                                   timeout_s=60)
        from tests.e2e.helpers import collect_run

        run1 = await collect_run(sub)
        model.queue([{"chunks": ["Hi!"]}], model="threadline-pii-tripwire")
        sent = await tl.stream("hello", agent_id="pii-tripwire", resource_id="res-1", thread_id=thread)
        accepted = await sent.accepted
        run2 = await collect_run(sub)
        await sub.unsubscribe()
    trip = {"reason": "PII in input", "processorId": "pii", "retry": False, "metadata": {"category": "pii"}}
    assert [c["type"] for c in run1 if c["type"] != "start"] == ["tripwire", "finish"]
    assert run1[-2]["payload"] == trip and run1[-1]["payload"]["stepResult"]["reason"] == "tripwire"
    Chunk.model_validate(run1[-2])  # the published chunk schema accepts it
    assert result.finish_reason == "other" and result.tripwire == trip and result.error is None
    assert accepted.action == "wake"  # the lease was released by run 1, not left to expire
    assert content(run2) == [("text-delta", "Hi!"), ("finish", "stop")]
    requests = model.requests(model="threadline-pii-tripwire")
    # the tripped input is not stored: the next turn's request does not hold it, nor the thread
    assert len(requests) == 1 and "x@y.z" not in str(requests[0]["body"]["messages"])
    stored = await rows(cluster.dsn, "SELECT role, content::text AS c FROM messages WHERE thread_id = $1", thread)
    assert [r["role"] for r in stored] == ["user", "assistant"] and "x@y.z" not in str(stored)


async def test_c05a_implicit_cap_of_ten_retries_then_the_mapped_error(services, settings, model, cluster):
    model.queue([{"status": 500, "times": 20}], model="threadline-api-retry-forever")
    run_id, chunks = await run_stream(settings, "api-retry-forever", "x")
    assert len(model.requests(model="threadline-api-retry-forever")) == 11
    run = await run_row(cluster.dsn, run_id)
    assert run["state"]["processor_state"]["ar"]["seen"] == list(range(10))
    kinds = [c for c in content(chunks) if c[0] != "attempt-discarded"]
    assert kinds[-2][0] == "error" and kinds[-2][1]["error"]["kind"] == "server_error"
    assert kinds[-1] == ("finish", "error")
    assert sum(1 for c in chunks if c["type"] == "attempt-discarded") == 10
    assert sum(1 for c in chunks if c["type"] == "finish") == 1
    assert run["status"] == "failed" and run["tripwire"] is None
    worker_log = (services.log_dir / "processor_worker-1.log").read_text()
    assert "implicit retry cap applied" in worker_log


async def test_c05b_call_level_cap(services, settings, model, cluster):
    model.queue([{"status": 500, "times": 20}], model="threadline-api-retry-forever")
    run_id, _ = await run_stream(settings, "api-retry-forever", "x", options={"max_processor_retries": 2})
    assert len(model.requests(model="threadline-api-retry-forever")) == 3
    assert (await run_row(cluster.dsn, run_id))["state"]["processor_state"]["ar"]["seen"] == [0, 1]


async def test_c05c_retry_without_a_cap_is_a_tripwire(services, settings, model, cluster):
    model.queue([ms.text("ok")], model="threadline-step-retry-uncapped")
    run_id, chunks = await run_stream(settings, "step-retry-uncapped", "x")
    assert len(model.requests(model="threadline-step-retry-uncapped")) == 1
    assert content(chunks)[-2:] == [
        ("tripwire", {"reason": "try again", "retry": True, "metadata": None, "processorId": "q"}),
        ("finish", "tripwire")]
    assert (await run_row(cluster.dsn, run_id))["status"] == "tripwire"


async def test_c07_tool_results_and_tool_data_chunks_go_through_processors(services, settings, model, cluster):
    model.queue([ms.tool_calls(ms.tool_call("lookup_customer", {"id": "c1"})), ms.text("Done.")],
                model="threadline-redacting-tools")
    run_id, chunks = await run_stream(settings, "redacting-tools", "who is c1?")
    seq = list(content(chunks))
    assert [c[0] for c in seq] == ["tool-call", "data-progress", "tool-result", "text-delta", "finish"]
    assert seq[1][1] == {"pct": 100}
    assert seq[2][1]["result"] == {"name": "Ann", "ssn": "[REDACTED]", "email": "[REDACTED]"}
    assert seq[-1] == ("finish", "stop")
    assert all(c["type"] and (c.get("payload") is not None or "data" in c) for c in chunks)
    step_finish = [c for c in chunks if c["type"] == "step-finish"][0]
    assert step_finish["payload"]["stepResult"]["reason"] == "tool-calls"
    run = await run_row(cluster.dsn, run_id)
    states = run["state"]["processor_state"]
    assert states["watch"]["counts"]["tool-call"] == 1 and states["watch"]["counts"]["tool-result"] == 1
    assert states["watch"]["counts"]["data-progress"] == 2
    assert not any(t.startswith("data-") for t in states["plain"]["types"])
    # the secret reached no table and no topic of ours
    for table in ("messages", "runs", "signals", "outbox", "tool_calls"):
        dump = await rows(cluster.dsn, f"SELECT count(*) AS n FROM {table} WHERE {table}::text LIKE '%123-45-6789%' "
                                       f"OR {table}::text LIKE '%a@b.c%'")
        assert dump[0]["n"] == 0, table
    second = model.requests(model="threadline-redacting-tools")[1]["body"]["messages"]
    tool_msg = next(m for m in second if m["role"] == "tool")
    assert "[REDACTED]" in tool_msg["content"] and "123-45-6789" not in tool_msg["content"]
    stored = await rows(cluster.dsn, "SELECT content FROM messages WHERE run_id = $1 AND role = 'assistant'", run_id)
    parts = stored[0]["content"]["parts"]
    assert not any(p["type"] == "data-progress" for p in parts)


async def test_c14a_in_band_rate_limit_retried_and_the_dead_attempt_declared(services, settings, model, cluster):
    model.queue([ms.in_band_error(429, "slow down", after=2, chunks=["Hel", "lo"]),
                 {"chunks": ["Hello there"]}], model="threadline-stream-errors")
    run_id, chunks = await run_stream(settings, "stream-errors", "greet me")
    seq = content(chunks)
    assert seq[0] == ("text-delta", "Hel") and seq[1] == ("text-delta", "lo")
    assert seq[2][0] == "attempt-discarded" and seq[2][1]["attempt"] == 1
    assert seq[3:] == [("text-delta", "Hello there"), ("finish", "stop")]
    assert [c["attempt"] for c in chunks if c["type"] == "text-delta"] == [1, 1, 2]
    assert sum(1 for c in chunks if c["type"] == "finish") == 1
    run = await run_row(cluster.dsn, run_id)
    states = run["state"]["processor_state"]
    assert states["rl"]["errors"][0]["kind"] == "rate_limit" and states["rl"]["errors"][0]["status"] == 429
    assert "error" not in states["obs"]["types"] and states["obs"]["results"] == ["stop"]
    stored = await rows(cluster.dsn, "SELECT content FROM messages WHERE run_id = $1 AND role = 'assistant'", run_id)
    texts = [p["text"] for p in stored[0]["content"]["parts"] if p["type"] == "text"]
    assert texts == ["Hello there"]
    assert len(model.requests(model="threadline-stream-errors")) == 2


async def test_c14b_rate_limit_every_time_fails_the_run_once(services, settings, model, cluster):
    model.queue([ms.in_band_error(429, "slow down", after=2, chunks=["Hel", "lo"], times=5)], model="threadline-stream-errors")
    run_id, chunks = await run_stream(settings, "stream-errors", "greet me")
    assert len(model.requests(model="threadline-stream-errors")) == 2
    seq = content(chunks)
    assert seq[-2][0] == "error" and seq[-2][1]["error"]["kind"] == "rate_limit" and seq[-1] == ("finish", "error")
    assert not any(c == ("finish", "stop") for c in seq)
    run = await run_row(cluster.dsn, run_id)
    assert run["status"] == "failed" and run["state"]["processor_state"]["obs"]["results"] == ["error"]
    # Mastra's stored shape (decision 170): the input, then what streamed and the error part
    stored = await rows(cluster.dsn, "SELECT role, content FROM messages WHERE run_id = $1 ORDER BY position", run_id)
    assert [r["role"] for r in stored] == ["user", "assistant"]
    assert [p["type"] for p in _parts(stored[1])] == ["text", "error"]


async def test_c14c_503_without_error_processors_fails_and_the_thread_goes_idle(services, settings, model, cluster):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    model.queue([{"status": 503}], model="threadline-stream-errors-unhandled")
    run_id, chunks = await run_stream(settings, "stream-errors-unhandled", "x", thread=thread)
    assert len(model.requests(model="threadline-stream-errors-unhandled")) == 1
    seq = content(chunks)
    assert seq[-2][0] == "error" and seq[-2][1]["error"]["kind"] == "service_unavailable"
    assert seq[-1] == ("finish", "error")
    run = await run_row(cluster.dsn, run_id)
    assert run["state"]["processor_state"]["obs"]["results"] == ["error"]
    stored = await rows(cluster.dsn, "SELECT role, content FROM messages WHERE thread_id = $1 ORDER BY position",
                        thread)
    assert [r["role"] for r in stored] == ["user", "assistant"]  # Mastra's stored shape (decision 170)
    assert [p["type"] for p in _parts(stored[1])] == ["error"]
    async with ThreadlineClient(settings) as tl:
        again = await tl.send_message("again", agent_id="stream-errors-unhandled", resource_id="res-1", thread_id=thread)
        assert (await again.accepted).action == "wake"
