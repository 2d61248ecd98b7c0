"""The fan-out reader (threadline.kafka.fanout) on the real broker: many streams over a constant
number of consumers, each stream every record from its start once and in order; a stream that
needs an earlier offset makes the partition be read again without a duplicate to the others; a
slow stream never holds the others back and then gets all it missed; a re-created topic is read
from its start; closing the last stream of a topic unassigns it; a reader at its maximum refuses."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from threadline.kafka.admin import TopicAdmin
from threadline.kafka.fanout import FanoutReader, FanoutStream, ReaderFullError, StartAt

WAIT_S = 30  # liveness bound only


@pytest.fixture
async def kafka(cluster):
    admin = TopicAdmin(cluster.bootstrap)
    await admin.start()
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=0)
    await producer.start()
    made: list[str] = []

    async def topics(n: int) -> list[str]:
        names = [f"{cluster.prefix}.fanout.{uuid.uuid4().hex[:10]}" for _ in range(n)]
        await admin.ensure(names, partitions=1)
        made.extend(names)
        return names

    yield admin, producer, topics
    await producer.stop()
    await admin.delete_and_wait(made)
    await admin.stop()


async def _put(producer: AIOKafkaProducer, topic: str, values: range) -> None:
    for v in values:
        await producer.send(topic, str(v).encode(), partition=0)
    await producer.flush()


async def _take(stream: FanoutStream, n: int) -> list[tuple[int, int]]:
    """``n`` records as (offset, value)."""
    out = []
    async with asyncio.timeout(WAIT_S):
        async for record in stream:
            out.append((record.offset, int(record.value)))
            if len(out) == n:
                break
    return out


async def test_sixty_streams_on_sixty_topics_share_two_consumers_and_each_gets_its_records_once(cluster, kafka):
    _, producer, topics = kafka
    names = await topics(60)
    for topic in names[:30]:  # half the topics have history before the streams open at their end
        await _put(producer, topic, range(3))
    reader = FanoutReader(cluster.bootstrap, consumers=2)
    try:
        streams = [await reader.open(t, StartAt()) for t in names]
        assert [s.start_offset for s in streams] == [3] * 30 + [0] * 30  # fixed before open returned (B16)
        assert reader.open_streams == 60
        assert len(reader._members) == 2  # the consumers it holds, whatever the streams
        await asyncio.gather(*(_put(producer, t, range(100, 110)) for t in names))
        got = await asyncio.gather(*(_take(s, 10) for s in streams))
        for stream, records in zip(streams, got, strict=True):
            first = stream.start_offset
            assert records == [(first + i, 100 + i) for i in range(10)]
        assert sum(len(m.consumer.assignment()) for m in reader._members) == 60
        for stream in streams[:59]:
            await stream.close()
        async with asyncio.timeout(WAIT_S):  # the consumer's loop applies the change between two fetches
            while (assigned := [tp.topic for m in reader._members for tp in m.consumer.assignment()]) != [names[59]]:
                await asyncio.sleep(0.02)
        assert assigned == [names[59]]
    finally:
        await reader.stop()


async def test_a_stream_that_needs_an_earlier_offset_is_served_without_a_duplicate_to_the_others(cluster, kafka):
    _, producer, topics = kafka
    (topic,) = await topics(1)
    await _put(producer, topic, range(10))
    reader = FanoutReader(cluster.bootstrap)
    try:
        late = await reader.open(topic, StartAt())
        await _put(producer, topic, range(10, 15))
        assert await _take(late, 5) == [(o, o) for o in range(10, 15)]
        early = await reader.open(topic, StartAt(offset=2))
        assert await _take(early, 13) == [(o, o) for o in range(2, 15)]
        await _put(producer, topic, range(15, 16))
        assert await _take(late, 1) == [(15, 15)]  # not 2..14 again
        assert await _take(early, 1) == [(15, 15)]
        beginning = await reader.open(topic, StartAt(beginning=True))
        assert beginning.start_offset == 0
        assert (await _take(beginning, 16))[-1] == (15, 15)
    finally:
        await reader.stop()


async def test_a_slow_stream_never_holds_back_the_others_and_then_gets_all_it_missed(cluster, kafka):
    _, producer, topics = kafka
    (topic,) = await topics(1)
    reader = FanoutReader(cluster.bootstrap, queue_records=4)
    try:
        slow = await reader.open(topic, StartAt())
        fast = await reader.open(topic, StartAt())
        await _put(producer, topic, range(40))
        assert await _take(fast, 40) == [(o, o) for o in range(40)]  # while slow reads nothing
        assert slow.detached
        assert await _take(slow, 40) == [(o, o) for o in range(40)]  # detached, then read again
        await _put(producer, topic, range(40, 41))
        assert await _take(fast, 1) == [(40, 40)]
        assert await _take(slow, 1) == [(40, 40)]
    finally:
        await reader.stop()


async def test_a_topic_deleted_and_made_again_is_read_from_its_start(cluster, kafka):
    admin, producer, topics = kafka
    (topic,) = await topics(1)
    await _put(producer, topic, range(5))
    reader = FanoutReader(cluster.bootstrap)
    try:
        stream = await reader.open(topic, StartAt())
        assert stream.start_offset == 5
        await admin.delete_and_wait([topic])
        await admin.ensure([topic], partitions=1)
        await _put(producer, topic, range(100, 102))
        assert await _take(stream, 2) == [(0, 100), (1, 101)]  # decision 41
    finally:
        await reader.stop()


async def test_a_reader_at_its_maximum_refuses_until_a_stream_closes(cluster, kafka):
    _, _, topics = kafka
    names = await topics(3)
    reader = FanoutReader(cluster.bootstrap, max_streams=2)
    try:
        first = await reader.open(names[0], StartAt())
        await reader.open(names[1], StartAt())
        with pytest.raises(ReaderFullError) as refused:
            await reader.open(names[2], StartAt())
        assert refused.value.retry_after_s > 0
        await first.close()
        await first.close()  # idempotent: counted once
        assert reader.open_streams == 1
        await reader.open(names[2], StartAt())
    finally:
        await reader.stop()
