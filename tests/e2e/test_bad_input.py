"""Bad input on the ingress topic: a dead letter with the reason, an error reply when the event
can be correlated, and the consumer goes on with the next event (invariant 8)."""

from __future__ import annotations

import asyncio
import uuid

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.e2e.helpers import collect_run
from threadline.client import ThreadlineClient
from threadline.topics import Topics

BAD = [
    (b"{not json", "invalid_json", None),
    (orjson.dumps({"event_id": "bad-type-1", "type": "launch_missiles"}), "unknown_type", "bad-type-1"),
    (orjson.dumps({"event_id": "bad-field-1", "type": "send_message", "agent_id": "support-agent",
                   "resource_id": "r"}), "validation_failed", "bad-field-1"),
    (orjson.dumps({"event_id": "bad-version-1", "type": "send_message", "schema_version": 7}),
     "unsupported_version", "bad-version-1"),
    (orjson.dumps({"event_id": "bad-agent-1", "type": "send_message", "agent_id": "nobody",
                   "resource_id": "r", "thread_id": "t-bad", "message": "hi"}), None, "bad-agent-1"),
    (b"\xff\xfe binary", "invalid_json", None),
]


async def _read_all(bootstrap: str, topic: str, want: int, timeout_s: float = 20.0) -> list[dict]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                group_id=None, enable_auto_commit=False)
    await consumer.start()
    out: list[dict] = []
    try:
        async def pump() -> None:
            async for record in consumer:
                out.append(orjson.loads(record.value))
                if len(out) >= want:
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
        waiting = {rid: tl._replies.expect(rid, "error") for _, _, rid in BAD if rid}
        try:
            for raw, _, _ in BAD:
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
    for raw, code, rid in BAD:
        if rid:
            assert replies[rid].type == "error"
            assert replies[rid].code == (code or "unknown_agent")
    letters = await _read_all(cluster.bootstrap, topics.dead_letters, want=sum(1 for _, c, _ in BAD if c))
    by_code = [letter["code"] for letter in letters]
    assert sorted(by_code) == sorted(c for _, c, _ in BAD if c)
    for letter in letters:
        assert letter["reason"] and letter["service"] == "ingress" and letter["source_topic"] == topics.ingress
    binary = next(letter for letter in letters if letter["raw_encoding"] == "base64")
    assert binary["code"] == "invalid_json"
    assert all(services.alive().values())
