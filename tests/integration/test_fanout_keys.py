"""The fan-out reader on a shared chunk topic, on the real broker (decisions 201 and 204): streams
of several threads on the partitions of one topic, each keeping its thread's records only; the
producer's partitioner (records sent by key, as the outbox relay sends) and
:func:`threadline.kafka.layout.chunk_partition` agree; a neighbour's traffic far beyond a stream's
queue never detaches it; a replay from the beginning is filtered alike; the partitions of one
topic spread over the reader's consumers."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from threadline.kafka.admin import TopicAdmin
from threadline.kafka.fanout import FanoutReader, FanoutStream, StartAt
from threadline.kafka.layout import chunk_partition

WAIT_S = 30  # liveness bound only
PARTITIONS = 16


@pytest.fixture
async def shared(cluster):
    admin = TopicAdmin(cluster.bootstrap)
    await admin.start()
    topic = f"{cluster.prefix}.chunks-shared-test.{uuid.uuid4().hex[:8]}"
    await admin.ensure([topic], partitions=PARTITIONS)
    await admin.wait_leaders([topic])
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=0)
    await producer.start()
    yield topic, producer
    await producer.stop()
    await admin.delete_and_wait([topic])
    await admin.stop()


def _keys_on_one_partition(n: int) -> list[bytes]:
    keys: list[bytes] = []
    while len(keys) < n:
        key = f"res:th-{uuid.uuid4().hex[:8]}".encode()
        if not keys or chunk_partition(key, PARTITIONS) == chunk_partition(keys[0], PARTITIONS):
            keys.append(key)
    return keys


async def _take(stream: FanoutStream, n: int) -> list[bytes]:
    out = []
    async with asyncio.timeout(WAIT_S):
        async for record in stream:
            out.append(record.value)
            if len(out) == n:
                break
    return out


async def test_streams_on_one_partition_keep_their_threads_records_and_a_neighbour_never_detaches_them(
        cluster, shared):
    topic, producer = shared
    mine, quiet, loud = _keys_on_one_partition(3)
    partition = chunk_partition(mine, PARTITIONS)
    reader = FanoutReader(cluster.bootstrap, consumers=2, queue_records=4)
    try:
        streams = {k: await reader.open(topic, StartAt(), partition=partition, key=k) for k in (mine, quiet)}
        for i in range(3):
            for _ in range(40):  # far more of a neighbour's records than a queue holds
                await producer.send(topic, b"noise", key=loud)
            await producer.send(topic, f"mine-{i}".encode(), key=mine)  # by key: the producer's partitioner
        await producer.send(topic, b"quiet-0", key=quiet)
        sent = [await producer.send(topic, b"mine-end", key=mine), await producer.send(topic, b"quiet-end", key=quiet)]
        metas = [await delivery for delivery in sent]
        assert {m.partition for m in metas} == {partition}  # the producer's choice is chunk_partition's
        assert await _take(streams[mine], 4) == [b"mine-0", b"mine-1", b"mine-2", b"mine-end"]
        assert await _take(streams[quiet], 2) == [b"quiet-0", b"quiet-end"]
        assert not streams[mine].detached and not streams[quiet].detached
        replay = await reader.open(topic, StartAt(beginning=True), partition=partition, key=mine)
        assert await _take(replay, 4) == [b"mine-0", b"mine-1", b"mine-2", b"mine-end"]
    finally:
        await reader.stop()


async def test_the_partitions_of_one_topic_spread_over_the_consumers(cluster, shared):
    topic, _ = shared
    reader = FanoutReader(cluster.bootstrap, consumers=2)
    try:
        for p in range(PARTITIONS):
            await reader.open(topic, StartAt(), partition=p, key=b"k")
        # not all on the consumer of the topic's name (16 partitions on one of two: 2 in 65,536)
        assert all(member.parts for member in reader._members)
    finally:
        await reader.stop()
