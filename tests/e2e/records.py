"""Reading topics raw in tests: every record from offset 0 up to the end offsets at the time of
the call (a replay: duplicates, dead attempts and foreign records included)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord


async def read_records(bootstrap: str, topics: list[str], *, partitions: int | None = 1,
                       timeout_s: float = 60) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of ``topics`` up to their current end offsets, in partition order.

    ``partitions`` is each topic's partition count (``None``: ask the broker). Raises
    ``AssertionError`` if the end is not reached within ``timeout_s`` seconds.
    """
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                                fetch_max_wait_ms=100, auto_offset_reset="earliest")
    await consumer.start()
    try:
        if partitions is None:
            parts = [TopicPartition(t, p) for t, ps in (await _partitions(bootstrap, topics)).items() for p in ps]
        else:
            parts = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        consumer.assign(parts)
        await consumer.seek_to_beginning()
        ends = await consumer.end_offsets(parts)
        out: list[ConsumerRecord[bytes, bytes]] = []
        deadline = time.monotonic() + timeout_s
        while [tp for tp in parts if await consumer.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, "replay did not reach the end offsets"
            batches = await consumer.getmany(timeout_ms=200, max_records=5000)
            for records in batches.values():
                out.extend(records)
        return out
    finally:
        await consumer.stop()


async def thread_records(bootstrap: str, tp: TopicPartition, key: bytes, *, start: int = 0,
                         at_least: int = 0, timeout_s: float = 60) -> list[ConsumerRecord[bytes, bytes]]:
    """The records of one thread (``key``) on ``tp`` from offset ``start`` up to the partition's
    end offset at the time of the call — in either chunk layout (a thread's own topic, or its
    partition of the shared chunk topic with other threads' records left out). With ``at_least``,
    asks again until that many are there. Raises ``AssertionError`` after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                                    fetch_max_wait_ms=100)
        await consumer.start()
        try:
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            consumer.seek(tp, start)
            out: list[ConsumerRecord[bytes, bytes]] = []
            while await consumer.position(tp) < end:
                assert time.monotonic() < deadline, "replay did not reach the end offset"
                for records in (await consumer.getmany(tp, timeout_ms=200, max_records=5000)).values():
                    out.extend(r for r in records if r.key == key and r.offset < end)
        finally:
            await consumer.stop()
        if len(out) >= at_least:
            return out
        assert time.monotonic() < deadline, f"{len(out)} records of the thread, not {at_least}, within {timeout_s} s"
        await asyncio.sleep(0.1)


async def _partitions(bootstrap: str, topics: list[str]) -> dict[str, list[int]]:
    """The partition numbers of each topic, as the broker describes them."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    return {d["topic"]: sorted(p["partition"] for p in d["partitions"]) for d in described}


async def read_all(bootstrap: str, topics: list[str], *, partitions: int | None = 1,
                   timeout_s: float = 60) -> list[dict[str, Any]]:
    """The JSON objects among :func:`read_records` (other values are left out)."""
    out = []
    for record in await read_records(bootstrap, topics, partitions=partitions, timeout_s=timeout_s):
        value = orjson.loads(record.value) if record.value is not None else None
        if isinstance(value, dict):
            out.append(value)
    return out


async def end_offset(bootstrap: str, tp: TopicPartition) -> int:
    """The end offset of one partition now."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        return (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()


async def read_lifecycle(bootstrap: str, topic: str, *, thread_id: str | None = None,
                         timeout_s: float = 60) -> list[dict[str, Any]]:
    """The lifecycle events of ``topic`` (of one thread with ``thread_id``), each once: the outbox
    publishes at least once (its relay may send again a row whose publisher has not marked it
    yet), so a consumer drops an ``event_id`` it has seen, as this does."""
    seen: set[str] = set()
    out = []
    for event in await read_all(bootstrap, [topic], partitions=None, timeout_s=timeout_s):
        if thread_id is not None and event.get("thread_id") != thread_id:
            continue
        if event.get("event_id") not in seen:
            seen.add(event.get("event_id"))
            out.append(event)
    return out
