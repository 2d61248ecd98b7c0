"""A property-based fuzz of the ingress topic.

Hypothesis generates thousands of events: raw bytes, JSON that is not an object, requests of every
type with fields deleted, replaced by nested junk or wrong types, huge and unicode strings, unknown
types and schema versions, hostile ``reply_to`` and ids, wrong record keys, and valid requests
mixed in. They are produced to the running ingress in one go; then every record must have an
answer: a reply with its ``event_id`` (when it names one) or a dead letter pointing at its offset.
No service may exit.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadline.kafka.admin import TopicAdmin
from threadline.topics import Topics, thread_key

EVENTS = 2000
TYPES = ["send_message", "queue_message", "send_signal", "send_state_signal", "send_notification_signal",
         "stream", "generate", "abort"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=30))
junk = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4), max_leaves=10)
ids = st.one_of(st.text(min_size=1, max_size=20), st.just(""), st.text(min_size=257, max_size=300),
                st.sampled_from(["../../etc", "a:b", "%00", "\u202e\u200b", "🧵🧵", "DROP TABLE runs;--"]))
huge = st.integers(20_000, 80_000).map(lambda n: ("ünïcødé 🧵 " * (n // 12 + 1))[:n])


def _dumps(value: Any) -> bytes:
    """JSON as a careless producer writes it: big integers, NaN and Infinity included."""
    return json.dumps(value, ensure_ascii=False).encode()


def _valid(kind: str, agent: str, resource: str, thread: str) -> dict[str, Any]:
    base: dict[str, Any] = {"type": kind, "agent_id": agent, "resource_id": resource, "thread_id": thread}
    if kind in ("send_message", "queue_message", "stream", "generate"):
        base["message"] = "fuzz hello"
    if kind in ("send_message", "send_signal", "send_state_signal"):
        base["if_idle"] = {"behavior": "persist"}
    if kind == "queue_message":
        base["if_idle"] = {"behavior": "persist"}
    if kind == "send_signal":
        base["signal"] = {"type": "note", "contents": "fuzz signal"}
    if kind == "send_state_signal":
        base["state"] = {"id": "lane", "cacheKey": "k1", "contents": "state"}
    if kind == "send_notification_signal":
        base["notifications"] = [{"source": "ci", "kind": "build", "summary": "fuzz"}]
    return base


@st.composite
def fuzz_event(draw: st.DrawFn) -> tuple[str, Any, dict[str, Any] | None]:
    """(shape, key, body-or-None); a body of None means ``raw`` bytes (key holds them)."""
    shape = draw(st.sampled_from(["bytes", "not-object", "mutated", "mutated", "mutated", "mutated",
                                  "unknown-agent", "valid"]))
    if shape == "bytes":
        return shape, draw(st.binary(max_size=300)), None
    if shape == "not-object":
        return shape, _dumps(draw(st.one_of(st.lists(junk, max_size=5), scalars.filter(lambda v: v is not None
                                                                                             and v == v)))), None
    kind = draw(st.sampled_from(TYPES))
    resource = draw(st.one_of(st.just("res-fz"), ids))
    thread = draw(st.one_of(st.just("th-fz"), ids))
    body = _valid(kind, "echo-agent" if shape == "valid" else "fuzz-nobody", resource, thread)
    if shape == "mutated":
        for _ in range(draw(st.integers(1, 3))):
            op = draw(st.sampled_from(["drop", "junk", "extra", "version", "type", "huge", "reply_to", "id",
                                       "nested", "options"]))
            field = draw(st.sampled_from(sorted(body) or ["type"]))
            if op == "drop":
                body.pop(field, None)
            elif op == "junk":
                body[field] = draw(junk)
            elif op == "extra":
                body[draw(st.text(min_size=1, max_size=12))] = draw(junk)
            elif op == "version":
                body["schema_version"] = draw(st.one_of(st.integers(-5, 10), st.text(max_size=3), junk))
            elif op == "type":
                body["type"] = draw(st.one_of(st.text(max_size=20), junk))
            elif op == "huge":
                body[draw(st.sampled_from(["message", "agent_id", "thread_id", field]))] = draw(huge)
            elif op == "reply_to":
                body["reply_to"] = draw(st.one_of(ids, st.sampled_from(["no-such-topic", "x" * 300, "a b"]), junk))
            elif op == "id":
                body["event_id"] = draw(st.one_of(ids, junk))
            elif op == "nested":
                body["message"] = draw(st.one_of(junk, st.lists(st.dictionaries(st.text(max_size=8), junk),
                                                                max_size=3)))
            elif op == "options":
                body[draw(st.sampled_from(["options", "if_idle", "if_active", "thread", "run_id"]))] = draw(junk)
    key_kind = draw(st.sampled_from(["right", "right", "right", "wrong", "none"]))
    if key_kind == "right" and isinstance(body.get("resource_id"), str) and isinstance(body.get("thread_id"), str):
        key: Any = thread_key(body["resource_id"], body["thread_id"]).encode()
    elif key_kind == "none":
        key = None
    else:
        key = draw(st.binary(min_size=1, max_size=40))
    return shape, key, body


def _generate(n: int) -> list[tuple[str, Any, dict[str, Any] | None]]:
    out: list[tuple[str, Any, dict[str, Any] | None]] = []

    @settings(max_examples=n, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(fuzz_event())
    def collect(event: tuple[str, Any, dict[str, Any] | None]) -> None:
        out.append(event)

    collect()
    return out


async def _read(bootstrap: str, topics: list[str], stop: Any, timeout_s: float) -> list[Any]:
    consumer = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                                enable_auto_commit=False, max_partition_fetch_bytes=8 * 1024 * 1024)
    await consumer.start()
    seen: list[Any] = []
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=5000)
            for records in batch.values():
                seen.extend(records)
            if stop(seen):
                break
    finally:
        await consumer.stop()
    return seen


async def _describe(bootstrap: str, topic: str, missing: list[tuple[int, int, str | None, str]]) -> str:
    """The records at the unanswered offsets (for the failure message)."""
    from aiokafka import TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    out = []
    try:
        for p, o, _, _ in missing:
            tp = TopicPartition(topic, p)
            consumer.assign([tp])
            consumer.seek(tp, o)
            got = await consumer.getmany(tp, timeout_ms=3000, max_records=1)
            out += [(r.offset, r.key, r.value[:300]) for r in got.get(tp, [])]
    finally:
        await consumer.stop()
    return repr(out)


async def test_fuzzed_ingress_events_are_each_answered_or_dead_lettered(services, cluster):
    topics = Topics(cluster.prefix)
    tag = uuid.uuid4().hex[:6]
    fuzz_replies = f"{cluster.prefix}.fuzz-replies"
    admin = TopicAdmin(cluster.bootstrap)
    await admin.start()
    await admin.ensure([fuzz_replies], partitions=1)
    await admin.stop()

    events = await asyncio.to_thread(_generate, EVENTS)
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, max_request_size=4 * 1024 * 1024,
                                linger_ms=5)
    await producer.start()
    sent: list[tuple[int, int, str | None, str]] = []  # (partition, offset, event id, shape)
    try:
        futures = []
        for i, (shape, key, body) in enumerate(events):
            if body is None:
                value, key, event_id = key, None, None
            else:
                body = dict(body)
                if "event_id" not in body:
                    body["event_id"] = f"fz-{tag}-{i}"
                if shape == "valid" and i % 3 == 0:
                    body["reply_to"] = fuzz_replies
                if shape == "valid":  # its own thread: a valid request must find the thread idle
                    body["thread_id"] = f"th-fz-{tag}-{i}"
                    key = thread_key(body["resource_id"], body["thread_id"]).encode()
                event_id = body["event_id"] if isinstance(body["event_id"], str) else None
                value = _dumps(body)
            futures.append((await producer.send(topics.ingress, value, key=key), event_id, shape))
        for fut, event_id, shape in futures:
            meta = await fut
            sent.append((meta.partition, meta.offset, event_id, shape))
    finally:
        await producer.stop()

    by_offset = {(p, o) for p, o, _, _ in sent}
    wanted_ids = {e for _, _, e, _ in sent if e}

    def unanswered(records: list[Any]) -> list[tuple[int, int, str | None, str]]:
        letters, replied = set(), set()
        for r in records:
            try:
                body = orjson.loads(r.value)
            except orjson.JSONDecodeError:
                continue
            if r.topic == topics.dead_letters and body.get("source_topic") == topics.ingress:
                if (body["partition"], body["offset"]) in by_offset:
                    letters.add((body["partition"], body["offset"]))
            elif body.get("request_id") in wanted_ids:
                replied.add(body["request_id"])
        return [s for s in sent if (s[0], s[1]) not in letters and not (s[2] and s[2] in replied)]

    records = await _read(cluster.bootstrap, [topics.dead_letters, topics.replies, fuzz_replies],
                          lambda seen: not unanswered(seen), timeout_s=60)
    missing = unanswered(records)
    detail = await _describe(cluster.bootstrap, topics.ingress, missing[:3]) if missing else ""
    assert not missing, f"{len(missing)} of {len(sent)} unanswered, e.g. {missing[:5]}: {detail}"
    assert all(services.alive().values()), services.alive()
    shapes = {s for _, _, _, s in sent}
    assert shapes == {"bytes", "not-object", "mutated", "unknown-agent", "valid"}


async def test_a_missing_reply_topic_an_empty_event_id_and_a_nul_are_refused(services, settings, cluster):
    """Found by the fuzz test: a ``reply_to`` naming a topic that does not exist was accepted (its
    reply could never be acknowledged, and blocked the outbox); an empty ``event_id`` made every
    later empty-id request a "duplicate" of the first; a NUL character (which PostgreSQL text
    cannot hold) in an ``abort`` was forwarded and failed at the orchestrator, unanswered. All are
    now refused with an error reply and dead-lettered."""
    from threadline.client import ThreadlineClient

    topics = Topics(cluster.prefix)
    tag = uuid.uuid4().hex[:6]
    thread = f"th-fz-{tag}"
    base = {"type": "send_message", "agent_id": "echo-agent", "resource_id": "res-fz", "thread_id": thread,
            "message": "hello", "if_idle": {"behavior": "persist"}}
    key = thread_key("res-fz", thread).encode()
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
    await producer.start()
    async with ThreadlineClient(settings) as tl:
        bad_reply = tl.transport.replies.expect(f"fz-{tag}-r", "error")
        nul_reply = tl.transport.replies.expect(f"fz-{tag}-nul", "error")
        try:
            await producer.send_and_wait(topics.ingress, _dumps({**base, "event_id": f"fz-{tag}-r",
                                                                 "reply_to": f"no-such-topic-{tag}"}), key=key)
            nul_resource = "r\u0000es"  # an abort was forwarded and failed at the orchestrator: no reply
            await producer.send_and_wait(topics.ingress, _dumps({"type": "abort", "agent_id": "echo-agent",
                                                                 "resource_id": nul_resource, "thread_id": thread,
                                                                 "event_id": f"fz-{tag}-nul"}),
                                         key=thread_key(nul_resource, thread).encode())
            empty = [await producer.send_and_wait(topics.ingress, _dumps({**base, "event_id": ""}), key=key)
                     for _ in range(2)]
        finally:
            await producer.stop()
        reply = await asyncio.wait_for(bad_reply, 30)
        assert reply.code == "unknown_reply_topic"
        assert (await asyncio.wait_for(nul_reply, 30)).code == "invalid_characters"
        sent = await tl.send_message("after", agent_id="echo-agent", resource_id="res-fz", thread_id=thread,
                                     if_idle={"behavior": "persist"})
        assert (await sent.accepted).type == "accepted"  # the service goes on
    offsets = {(m.partition, m.offset) for m in empty}

    def done(seen: list[Any]) -> bool:
        return offsets <= {(b["partition"], b["offset"]) for b in (orjson.loads(r.value) for r in seen)
                           if b.get("source_topic") == topics.ingress and b.get("code") == "invalid_event_id"}

    assert done(await _read(cluster.bootstrap, [topics.dead_letters], done, timeout_s=30))
