"""Decision 101: ``subscribe_to_thread`` of a thread that never spoke connects its consumer while
the thread's topic is being made, and starts at the new topic's offset 0 without asking the
broker for the end (everything in a topic made by this call came after it began); a thread whose
topic exists still starts at its end. A subscription whose topic cannot be made leaves no
consumer behind."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from threadline.client.client import ThreadlineClient
from threadline.config import Settings


@pytest.fixture
def asked_for_end(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The partitions whose end a consumer asked the broker for (``seek_to_end``)."""
    asked: list[Any] = []
    original = AIOKafkaConsumer.seek_to_end

    async def counting(self: AIOKafkaConsumer, *partitions: Any) -> None:
        asked.extend(partitions)
        await original(self, *partitions)

    monkeypatch.setattr(AIOKafkaConsumer, "seek_to_end", counting)
    return asked


def _settings(own_cluster: Any) -> Settings:
    return Settings(kafka_bootstrap=own_cluster.bootstrap, topic_prefix=own_cluster.prefix, partitions=1,
                    reply_timeout_s=30)


async def _produce(bootstrap: str, topic: str, *types: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i, kind in enumerate(types):
            await producer.send_and_wait(topic, orjson.dumps({"type": kind, "runId": "run-x", "seq": i}))
    finally:
        await producer.stop()


async def _first(sub: Any) -> dict[str, Any]:
    async for chunk in sub.stream:
        return chunk
    raise AssertionError("the stream ended")


async def test_a_new_threads_subscription_starts_at_offset_0_without_asking_for_the_end(
        own_cluster: Any, asked_for_end: list[Any]) -> None:
    thread = f"new-{uuid.uuid4().hex[:8]}"
    async with ThreadlineClient(_settings(own_cluster)) as tl:
        sub = await tl.subscribe_to_thread("res", thread)
        try:
            assert sub.start_offset == 0 and [tp for tp in asked_for_end if tp.topic == sub.topic] == []
            await _produce(own_cluster.bootstrap, sub.topic, "text-delta")
            assert (await _first(sub))["type"] == "text-delta"  # the first chunk after the subscription
        finally:
            await sub.unsubscribe()


async def test_a_thread_whose_topic_exists_starts_at_its_end(own_cluster: Any, asked_for_end: list[Any]) -> None:
    thread = f"old-{uuid.uuid4().hex[:8]}"
    async with ThreadlineClient(_settings(own_cluster)) as tl:
        first = await tl.subscribe_to_thread("res", thread)
        await first.unsubscribe()
        await _produce(own_cluster.bootstrap, first.topic, "text-delta", "finish")
        asked_for_end.clear()
        sub = await tl.subscribe_to_thread("res", thread)
        try:
            # what was there before is not replayed
            assert sub.start_offset == 2 and [tp.topic for tp in asked_for_end] == [sub.topic]
            await _produce(own_cluster.bootstrap, sub.topic, "start")
            assert (await _first(sub))["type"] == "start"
        finally:
            await sub.unsubscribe()


async def test_a_subscription_whose_topic_cannot_be_made_leaves_no_consumer(
        own_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    stopped: list[AIOKafkaConsumer] = []
    started: list[AIOKafkaConsumer] = []
    start, stop = AIOKafkaConsumer.start, AIOKafkaConsumer.stop

    async def recording_start(self: AIOKafkaConsumer) -> None:
        started.append(self)
        await start(self)

    async def recording_stop(self: AIOKafkaConsumer) -> None:
        stopped.append(self)
        await stop(self)

    monkeypatch.setattr(AIOKafkaConsumer, "start", recording_start)
    monkeypatch.setattr(AIOKafkaConsumer, "stop", recording_stop)
    async with ThreadlineClient(_settings(own_cluster)) as tl:
        async def refused(*_a: Any, **_kw: Any) -> bool:
            raise RuntimeError("creating topic failed with error code 29")

        monkeypatch.setattr(tl.transport.admin, "ensure_chunk_topic", refused)
        before = len(started)
        with pytest.raises(RuntimeError, match="error code 29"):
            await tl.subscribe_to_thread("res", f"refused-{uuid.uuid4().hex[:8]}")
        ours = started[before:]
        assert len(ours) == 1 and ours[0] in stopped  # its consumer was started beside the topic, then closed
