"""A group member that joined while its topic had no partitions it could be given (the broker
just restarted and had not elected their leaders yet, or the topic was not there) gets them
within seconds once they are there: the consumer refreshes its metadata every
``metadata_max_age_ms`` (5 s), and a changed partition set makes the group rebalance. With
aiokafka's default (5 minutes) the member stayed with nothing: chaos seed 605, after a broker
restart that took 38 s, left both orchestrators with no partition and 59 of 60 runs' last
results unapplied for minutes (docs/decisions.md#late-partitions)."""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaProducer

from threadline.kafka.admin import TopicAdmin
from threadline.kafka.consumer import KeyedConsumer


async def test_a_member_that_joined_before_its_partitions_existed_gets_them(own_cluster):
    topic = f"{own_cluster.prefix}.late-{uuid.uuid4().hex[:6]}"
    got = asyncio.Event()

    async def handle(_record: object) -> None:
        got.set()

    consumer = KeyedConsumer(bootstrap=own_cluster.bootstrap, topics=[topic], group_id=f"g-{topic}", handler=handle)
    await consumer.start()
    try:
        async with asyncio.timeout(30):
            while not consumer.joined:
                await asyncio.sleep(0.1)
        assert consumer._consumer.assignment() == set()  # nothing to be given yet
        admin = TopicAdmin(own_cluster.bootstrap)
        await admin.start()
        try:
            await admin.ensure([topic], partitions=2)
        finally:
            await admin.stop()
        producer = AIOKafkaProducer(bootstrap_servers=own_cluster.bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"{}", key=b"k")
        finally:
            await producer.stop()
        async with asyncio.timeout(20):  # aiokafka's default metadata age would keep it waiting 5 minutes
            await got.wait()
        assert len(consumer._consumer.assignment()) == 2
    finally:
        await consumer.stop()
