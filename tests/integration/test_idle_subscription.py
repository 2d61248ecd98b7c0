"""An open subscription on a quiet thread asks the broker rarely and still gets the next chunk:
the broker holds its fetch until a record arrives or ``IDLE_FETCH_WAIT_MS`` passes. Each
subscription is a consumer of its own, so a gateway's open streams each poll the broker."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.protocol.fetch import FetchRequest

from threadline.client.replies import ReplyListener
from threadline.client.subscription import ThreadSubscription
from threadline.kafka.admin import TopicAdmin

QUIET_S = 1.5


def _count_fetches(consumer: Any) -> list[int]:
    """Count the fetch requests ``consumer`` sends from now on (its client's ``send``)."""
    count = [0]
    send = consumer._client.send

    async def counting(node_id: int, request: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(request, FetchRequest):
            count[0] += 1
        return await send(node_id, request, *args, **kw)

    consumer._client.send = counting
    return count


async def test_a_quiet_subscription_asks_a_few_times_a_second_and_gets_the_next_chunk(cluster) -> None:
    topic = f"{cluster.prefix}.idle-sub.{uuid.uuid4().hex[:8]}"
    admin = TopicAdmin(cluster.bootstrap)
    await admin.start()
    sub = ThreadSubscription(cluster.bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
    try:
        await admin.ensure([topic], partitions=1)
        await sub.start()
        await producer.start()
        fetches = _count_fetches(sub._consumer)
        stream = sub.stream
        first = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(QUIET_S)
        # 10 ms, as before: ~150 fetches in 1.5 s; 500 ms: 3-4
        assert fetches[0] <= 10, fetches[0]
        assert not first.done()
        await producer.send_and_wait(topic, orjson.dumps({"runId": "run-q", "seq": 0, "type": "text-delta"}),
                                     partition=0)
        chunk = await asyncio.wait_for(first, 30)  # liveness only: the held fetch returns with it
        assert (chunk["runId"], chunk["seq"]) == ("run-q", 0)
    finally:
        await producer.stop()
        await sub.unsubscribe()
        await admin.delete_and_wait([topic])
        await admin.stop()


async def test_a_clients_reply_listener_asks_a_few_times_a_second(cluster) -> None:
    topic = f"{cluster.prefix}.idle-replies.{uuid.uuid4().hex[:8]}"
    admin = TopicAdmin(cluster.bootstrap)
    await admin.start()
    listener = ReplyListener(cluster.bootstrap, topic)
    try:
        await admin.ensure([topic], partitions=1)
        await listener.start()
        fetches = _count_fetches(listener._consumer)
        await asyncio.sleep(QUIET_S)
        assert fetches[0] <= 10, fetches[0]  # at 20 ms, as before: ~75
    finally:
        await listener.stop()
        await admin.delete_and_wait([topic])
        await admin.stop()
