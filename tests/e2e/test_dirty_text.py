"""Text PostgreSQL or UTF-8 cannot hold (decision 18): U+0000 and lone surrogate
halves in model text, tool arguments, tool results, messages and signals are replaced by U+FFFD
where they enter, so the run finishes and everything is stored; a record no parser can read is
dead-lettered AND answered."""

from __future__ import annotations

import asyncio
import json
import uuid

import orjson
from aiokafka import AIOKafkaProducer

from tests.e2e.helpers import collect_run, rows, run_row, wait_idle
from tests.e2e.test_ingress_fuzz import _read
from threadline.client import ThreadlineClient
from threadline.topics import Topics, thread_key

R = "\ufffd"


def _sse(*deltas: dict, finish: str) -> str:
    """A raw SSE body; ``json.dumps`` writes U+0000 as ``\\u0000`` and a lone half as ``\\ud800``."""
    events = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return "".join("data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                          **e}) + "\n\n" for e in events) + "data: [DONE]\n\n"


async def test_dirty_model_text_tool_arguments_and_tool_results_are_cleaned_and_stored(services, settings, model,
                                                                                       cluster):
    # the arguments hold a NUL (a real one after the SSE is parsed) and an escaped lone half
    # (a real one after the arguments are parsed)
    args = '{"text": "q\u0000r\\ud800s"}'
    step0 = _sse({"role": "assistant", "content": "Hi \u0000 there \ud800!"},
                 {"reasoning_content": "think\u0000"},
                 {"tool_calls": [{"index": 0, "id": "call_d", "type": "function",
                                  "function": {"name": "dirty", "arguments": args}}]}, finish="tool_calls")
    step1 = _sse({"content": "done \udc00 \u0000"}, finish="stop")
    model.queue([{"raw": step0, "content_type": "text/event-stream"},
                 {"raw": step1, "content_type": "text/event-stream"}], model="threadline-dirty-text")
    thread = f"th-dirty-{uuid.uuid4().hex[:6]}"
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        accepted = await (await tl.stream("go", agent_id="dirty-text", resource_id="res-1", thread_id=thread)).accepted
        chunks = await collect_run(sub)
        await sub.unsubscribe()
    assert chunks[-1]["type"] == "finish" and chunks[-1]["payload"]["finishReason"] == "stop", chunks[-3:]
    text = "".join(c["payload"]["text"] for c in chunks if c["type"] == "text-delta")
    assert text == f"Hi {R} there {R}!done {R} {R}"
    call = next(c for c in chunks if c["type"] == "tool-call")
    assert call["payload"]["args"] == {"text": f"q{R}r{R}s"}
    result = next(c for c in chunks if c["type"] == "tool-result")["payload"]["result"]
    dirty = f"nul{R} lone{R} low{R}"
    assert result == {"echo": f"q{R}r{R}s", "dirty": dirty, "nested": [{f"k{R}": dirty}]}
    row = await run_row(cluster.dsn, accepted.run_id)
    assert row["status"] == "finished" and row["finish_reason"] == "stop"
    stored = [r["c"] for r in await rows(cluster.dsn, "SELECT content::text AS c FROM messages WHERE run_id = $1 "
                                                      "ORDER BY position", accepted.run_id)]
    assert any("done \ufffd \ufffd" in c for c in stored) and any(dirty in c for c in stored), stored
    # the model saw the cleaned tool result in the next request
    second = model.requests(model="threadline-dirty-text")[1]
    assert R in json.dumps(second["body"]["messages"], ensure_ascii=False)
    assert await wait_idle(cluster.dsn, thread)


async def test_dirty_messages_and_signals_are_cleaned_and_a_dirty_id_is_refused(services, settings, model, cluster):
    """send_message and send_signal carrying U+0000 and a lone half (as JSON escapes: the record
    is valid JSON that orjson refuses) are accepted with U+FFFD; a dirty thread id is refused."""
    topics = Topics(cluster.prefix)
    thread = f"th-dirtyin-{uuid.uuid4().hex[:6]}"
    key = thread_key("res-1", thread).encode()
    base = {"agent_id": "echo-agent", "resource_id": "res-1", "thread_id": thread}
    msg = {**base, "type": "send_message", "event_id": f"dm-{thread}", "if_idle": {"behavior": "persist"},
           "message": {"contents": "m\u0000 \ud800", "metadata": {"note": "x\udfff"}}}
    sig = {**base, "type": "send_signal", "event_id": f"ds-{thread}", "if_idle": {"behavior": "persist"},
           "signal": {"type": "reactive", "contents": "s\u0000\ud800", "attributes": {"a": "\u0000"}}}
    bad = {**base, "type": "send_message", "event_id": f"dx-{thread}", "thread_id": thread + "\ud800",
           "message": "hi"}
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
    await producer.start()
    async with ThreadlineClient(settings) as tl:
        ok_m = tl.transport.replies.expect(msg["event_id"], "accepted")
        ok_s = tl.transport.replies.expect(sig["event_id"], "accepted")
        refused = tl.transport.replies.expect(bad["event_id"], "error")
        try:
            for body in (msg, sig, bad):
                await producer.send_and_wait(topics.ingress, json.dumps(body).encode(), key=key)
        finally:
            await producer.stop()
        for fut in (ok_m, ok_s):
            reply = await asyncio.wait_for(fut, 30)
            assert reply.type == "accepted", reply
        error = await asyncio.wait_for(refused, 30)
    assert error.code == "invalid_characters"
    stored = [r["c"] for r in await rows(cluster.dsn, "SELECT content::text AS c FROM messages WHERE thread_id = $1",
                                         thread)]
    assert any(f"m{R} {R}" in c for c in stored), stored
    signals = [r["p"] for r in await rows(cluster.dsn, "SELECT payload::text AS p FROM signals WHERE thread_id = $1",
                                          thread)]
    assert any(f"s{R}{R}" in p for p in signals), signals
    assert all(services.alive().values())


async def test_a_record_no_parser_can_read_gets_a_dead_letter_and_an_error_reply(services, settings, cluster):
    topics = Topics(cluster.prefix)
    rid = f"bytes-{uuid.uuid4().hex[:8]}"
    reply_topic = topics.replies
    records = {  # bytes that are not UTF-8 inside a string; JSON cut short
        f"{rid}-u": (b'{"event_id": "' + f"{rid}-u".encode() + b'", "type": "send_message", "agent_id": "echo-agent",'
                     b' "resource_id": "r", "thread_id": "t-bytes", "message": "\xff\xfe \xed\xa0\x80"}'),
        f"{rid}-j": b'{"event_id": "' + f"{rid}-j".encode() + b'", "reply_to": "' + reply_topic.encode() + b'", "type": ',
    }
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
    await producer.start()
    sent = []
    async with ThreadlineClient(settings) as tl:
        waiting = {r: tl.transport.replies.expect(r, "error") for r in records}
        try:
            for value in records.values():
                sent.append(await producer.send_and_wait(topics.ingress, value, key=b"r:t-bytes"))
        finally:
            await producer.stop()
        replies = {r: await asyncio.wait_for(f, 30) for r, f in waiting.items()}
    assert {r.code for r in replies.values()} == {"invalid_json"}
    offsets = {(m.partition, m.offset) for m in sent}

    def done(seen: list) -> bool:
        return offsets <= {(b["partition"], b["offset"]) for b in (orjson.loads(r.value) for r in seen)
                           if b.get("source_topic") == topics.ingress and b.get("code") == "invalid_json"}

    assert done(await _read(cluster.bootstrap, [topics.dead_letters], done, timeout_s=30))
    assert all(services.alive().values())
