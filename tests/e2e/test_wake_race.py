"""C16: two ingress instances receive messages for the same idle thread at once; exactly one
run starts, the other message is delivered into it (docs/decisions.md#wake-lease)."""

from __future__ import annotations

import asyncio
import uuid

import orjson
from aiokafka import AIOKafkaProducer

from tests.e2e.helpers import USER_AUTHORED, collect_run, rows, run_row, wait_idle
from threadline.client import ThreadlineClient
from threadline.events import SendMessage
from threadline.topics import Topics, thread_key


async def test_c16_double_texting_starts_one_run(services, settings, model, cluster):
    topics = Topics(cluster.prefix)
    second_topic = f"{cluster.prefix}.ingress-b"
    services.start("ingress", "ingress-b", THREADLINE_INGRESS_TOPIC=second_topic)
    await asyncio.to_thread(services.wait_log, "ingress-b", "partitions assigned", 30)
    thread = f"th-race-{uuid.uuid4().hex[:6]}"
    key = thread_key("res-1", thread).encode()
    model.queue([{"chunks": [f"n{i} " for i in range(20)], "chunk_delay": 0.05}, {"chunks": ["Boston it is."]}],
                model="threadline-signals")
    m1 = SendMessage(agent_id="signals", resource_id="res-1", thread_id=thread, message="Book a flight to NYC")
    m2 = SendMessage(agent_id="signals", resource_id="res-1", thread_id=thread, message="Actually, Boston")
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=0)
    await producer.start()
    try:
        async with ThreadlineClient(settings) as tl:
            sub = await tl.subscribe_to_thread("res-1", thread)
            r1, r2 = tl.transport.replies.expect(m1.event_id, "accepted"), tl.transport.replies.expect(m2.event_id, "accepted")
            await producer.send_and_wait(topics.ingress, orjson.dumps(m1.dump()), key=key)
            await asyncio.sleep(0.005)
            await producer.send_and_wait(second_topic, orjson.dumps(m2.dump()), key=key)
            a1, a2 = await asyncio.wait_for(r1, 20), await asyncio.wait_for(r2, 20)
            chunks = await collect_run(sub, timeout_s=60)
            await sub.unsubscribe()
    finally:
        await producer.stop()
        services.stop("ingress-b")
    assert {a1.action, a2.action} == {"wake", "deliver"} and a1.run_id == a2.run_id
    run_id = a1.run_id
    assert {c["runId"] for c in chunks} == {run_id}
    await run_row(cluster.dsn, run_id)
    assert await wait_idle(cluster.dsn, thread)
    assert (await rows(cluster.dsn, "SELECT epoch FROM thread_leases WHERE thread_id = $1", thread))[0]["epoch"] == 1
    assert (await rows(cluster.dsn, "SELECT count(*) AS n FROM runs WHERE thread_id = $1", thread))[0]["n"] == 1
    requests = model.requests(model="threadline-signals")
    assert len(requests) == 2
    convo = [(m["role"], m.get("content")) for m in requests[1]["body"]["messages"] if m["role"] != "system"]
    first, second = ("Book a flight to NYC", "Actually, Boston") if a1.action == "wake" else \
        ("Actually, Boston", "Book a flight to NYC")
    assert convo[0] == ("user", first) and convo[1][0] == "assistant" and convo[-1] == ("user", second)
    users = await rows(cluster.dsn, f"SELECT content FROM messages WHERE thread_id = $1 AND {USER_AUTHORED} "
                       "ORDER BY position", thread)  # sent messages: role signal, as Mastra's
    assert [u["content"]["parts"][0]["text"] for u in users] == [first, second]
