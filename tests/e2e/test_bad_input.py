"""Bad input on the ingress topic: a dead letter with the reason, an error reply when the event
can be correlated, and the consumer goes on with the next event (invariant 8)."""

from __future__ import annotations

import asyncio
import base64
import uuid

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.e2e.helpers import USER_AUTHORED, collect_run, rows
from threadline.client import ThreadlineClient
from threadline.topics import Topics

BAD = [  # (record, dead-letter code or None, request id, error-reply code)
    (b"{not json", "invalid_json", None, None),
    (orjson.dumps({"event_id": "bad-type-1", "type": "launch_missiles"}), "unknown_type", "bad-type-1", "unknown_type"),
    (orjson.dumps({"event_id": "bad-field-1", "type": "send_message", "agent_id": "support-agent",
                   "resource_id": "r"}), "validation_failed", "bad-field-1", "validation_failed"),
    (orjson.dumps({"event_id": "bad-version-1", "type": "send_message", "schema_version": 7}),
     "unsupported_version", "bad-version-1", "unsupported_version"),
    (orjson.dumps({"event_id": "bad-key-1", "type": "send_message", "agent_id": "echo-agent",
                   "resource_id": "other", "thread_id": "t-other", "message": "hi"}), "wrong_key", "bad-key-1",
     "wrong_key"),
    (orjson.dumps({"event_id": "bad-agent-1", "type": "send_message", "agent_id": "nobody",
                   "resource_id": "r", "thread_id": "t-bad", "message": "hi"}), None, "bad-agent-1", "unknown_agent"),
    (orjson.dumps({"event_id": "bad-parts-1", "type": "stream", "agent_id": "echo-agent", "resource_id": "r",
                   "thread_id": "t-bad", "message": [{"role": "user", "content": "mastra shape"}]}),
     None, "bad-parts-1", "invalid_parts"),
    (b"\xff\xfe binary", "invalid_json", None, None),
    # JSON, but not UTF-8 bytes (a surrogate encoded as UTF-8): no parser reads it, the ids still are
    (b'{"event_id": "bad-utf8-1", "type": "send_message", "agent_id": "echo-agent", "resource_id": "r", '
     b'"thread_id": "t-bad", "message": "half \xed\xa0\x80 a pair"}', "invalid_json", "bad-utf8-1", "invalid_json"),
    # a lone surrogate escape in an id (decision 18: content is cleaned, ids and keys are refused)
    (b'{"event_id": "bad-id-1", "type": "send_message", "agent_id": "echo-agent", "resource_id": "r", '
     b'"thread_id": "t-bad\\ud800", "message": "hi"}', "invalid_characters", "bad-id-1", "invalid_characters"),
]


def _as_letter(raw: bytes) -> str:
    """``raw`` as a dead letter holds it (``raw``: UTF-8 text, else base64)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode()


async def _read_all(bootstrap: str, topic: str, raws: list[bytes], timeout_s: float = 20.0) -> list[dict]:
    """The dead letters holding ``raws``: the session's services and topics are shared by every
    test of this pytest worker, so letters of earlier tests are left out."""
    want = {_as_letter(raw) for raw in raws}
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                group_id=None, enable_auto_commit=False)
    await consumer.start()
    out: list[dict] = []
    try:
        async def pump() -> None:
            async for record in consumer:
                letter = orjson.loads(record.value)
                if letter.get("raw") in want:
                    out.append(letter)
                if len(out) >= len(raws):
                    return
        await asyncio.wait_for(pump(), timeout_s)
    finally:
        await consumer.stop()
    return out


async def test_bad_ingress_events_are_dead_lettered_answered_and_the_consumer_goes_on(services, settings, model, cluster):
    topics = Topics(cluster.prefix)
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
    await producer.start()
    async with ThreadlineClient(settings) as tl:
        waiting = {rid: tl.transport.replies.expect(rid, "error") for _, _, rid, _ in BAD if rid}
        try:
            for raw, *_ in BAD:
                await producer.send_and_wait(topics.ingress, raw, key=b"r:t-bad")
        finally:
            await producer.stop()
        # the consumer goes on: a good request on the same key (same partition) right after
        thread = f"th-{uuid.uuid4().hex[:8]}"
        sub = await tl.subscribe_to_thread("res-1", thread)
        sent = await tl.send_message("hello", agent_id="echo-agent", resource_id="res-1", thread_id=thread)
        assert (await sent.accepted).action == "wake"
        chunks = await collect_run(sub)
        assert chunks[-1]["payload"]["finishReason"] == "stop"
        replies = {rid: await asyncio.wait_for(fut, 20) for rid, fut in waiting.items()}
    for _, _, rid, reply_code in BAD:
        if rid:
            assert replies[rid].type == "error" and replies[rid].code == reply_code, rid
    letters = await _read_all(cluster.bootstrap, topics.dead_letters, [raw for raw, c, _, _ in BAD if c])
    assert sorted(letter["code"] for letter in letters) == sorted(c for _, c, _, _ in BAD if c)
    for letter in letters:
        assert letter["reason"] and letter["service"] == "ingress" and letter["source_topic"] == topics.ingress
    # nothing was started for the rejected requests
    runs = await rows(cluster.dsn, "SELECT count(*) AS n FROM runs WHERE thread_id IN ('t-bad', 't-other')")
    assert runs[0]["n"] == 0
    binary = next(letter for letter in letters if letter["raw_encoding"] == "base64")
    assert binary["code"] == "invalid_json"
    assert all(services.alive().values())


async def test_a_resent_request_is_answered_again_and_has_no_second_effect(services, settings, model, cluster):
    thread = f"th-{uuid.uuid4().hex[:8]}"
    topics = Topics(cluster.prefix)
    request = {"event_id": f"req-{thread}", "type": "send_message", "agent_id": "echo-agent",
               "resource_id": "res-1", "thread_id": thread, "message": "hello"}
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
    await producer.start()
    async with ThreadlineClient(settings) as tl:
        sub = await tl.subscribe_to_thread("res-1", thread)
        first = tl.transport.replies.expect(request["event_id"], "accepted")
        await producer.send_and_wait(topics.ingress, orjson.dumps(request), key=f"res-1:{thread}".encode())
        accepted = await asyncio.wait_for(first, 20)
        await collect_run(sub)
        again = tl.transport.replies.expect(request["event_id"], "accepted")
        await producer.send_and_wait(topics.ingress, orjson.dumps(request), key=f"res-1:{thread}".encode())
        repeated = await asyncio.wait_for(again, 20)
        await producer.stop()
        await sub.unsubscribe()
    assert repeated.action == accepted.action == "wake" and repeated.run_id == accepted.run_id
    assert (await rows(cluster.dsn, "SELECT count(*) AS n FROM runs WHERE thread_id = $1", thread))[0]["n"] == 1
    assert (await rows(cluster.dsn, f"SELECT count(*) AS n FROM messages WHERE thread_id = $1 AND {USER_AUTHORED}",
                       thread))[0]["n"] == 1
