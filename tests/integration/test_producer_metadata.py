"""``Producer.learn_topics``: the chunk topics a batch took are known to the producer before the
first record is sent to them (one metadata request for the batch; without it aiokafka asks at
each topic's first send and, while another request is in flight, retries every 100 ms)."""

from __future__ import annotations

import asyncio
import uuid

from threadline.kafka.admin import TopicAdmin
from threadline.kafka.producer import Producer


async def test_learned_topics_have_metadata_before_their_first_send(cluster) -> None:
    tag = uuid.uuid4().hex[:8]
    topics = [f"{cluster.prefix}.learn.{tag}.{i}" for i in range(30)]
    admin = TopicAdmin(cluster.bootstrap)
    await admin.start()
    try:
        async with Producer(cluster.bootstrap) as producer:
            # created after the producer started: its first metadata (every topic, on a fresh
            # cluster) cannot hold them
            await admin.ensure(topics, partitions=1)
            for t in topics:
                await admin.wait_leaders([t])
            client = producer._p.client
            assert all(client.cluster.partitions_for_topic(t) is None for t in topics)
            producer.learn_topics(topics)
            for _ in range(100):
                if all(client.cluster.partitions_for_topic(t) for t in topics):
                    break
                await asyncio.sleep(0.05)
            assert all(client.cluster.partitions_for_topic(t) == {0} for t in topics)
            await producer.publish_raw(topics[0], b"x")  # sends straight away
    finally:
        await admin.delete_and_wait(topics)
        await admin.stop()


async def test_learning_before_start_or_twice_is_harmless(cluster) -> None:
    producer = Producer(cluster.bootstrap)
    producer.learn_topics(["not-started"])  # nothing to do yet
    async with producer:
        producer.learn_topics([f"{cluster.prefix}.never-created-{uuid.uuid4().hex[:6]}"])
        producer.learn_topics([f"{cluster.prefix}.never-created-{uuid.uuid4().hex[:6]}"])
        await asyncio.sleep(0.3)  # the fetch answers "unknown topic"; nothing raised, nothing logged as unhandled
