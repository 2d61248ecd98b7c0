"""D14 (pure part): records of a revoked partition that a member fetched or queued but had not
started are dropped at the revocation, never started there; records of the partitions it keeps
go on in key order, and the one running finishes without moving the revoked partition's offset
(``threadline.kafka.consumer``, decision 222). A stopping consumer starts no queued record either."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import TopicPartition

from threadline.kafka.consumer import KeyedConsumer, OffsetTracker, _ranges

pytestmark = pytest.mark.unit

TOPIC = "t"
P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


@dataclass
class _Record:
    topic: str
    partition: int
    offset: int
    key: bytes


class _StubKafka:
    """What the consumer calls on aiokafka, recorded (no broker)."""

    def __init__(self) -> None:
        self.committed: list[dict[TopicPartition, int]] = []
        self.assigned = {P0, P1}
        self.resumed: list[TopicPartition] = []

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def pause(self, *tps: TopicPartition) -> None: ...

    def resume(self, *tps: TopicPartition) -> None:
        self.resumed += tps

    async def commit(self, offsets: dict[TopicPartition, Any]) -> None:
        self.committed.append({tp: om.offset for tp, om in offsets.items()})

    async def stop(self) -> None: ...


class _Member:
    """A consumer whose handler records each start and waits until released."""

    def __init__(self, max_in_flight: int = 2000) -> None:
        self.started: list[tuple[int, int]] = []
        self.release = asyncio.Event()
        self.consumer = KeyedConsumer(bootstrap="broker:9092", topics=[TOPIC], group_id="g", handler=self.handle,
                                      max_in_flight=max_in_flight)
        self.kafka = _StubKafka()
        self.consumer._consumer = self.kafka  # type: ignore[assignment]  # no broker in a unit test

    async def handle(self, record: _Record) -> None:
        self.started.append((record.partition, record.offset))
        await self.release.wait()

    def fetch(self, partition: int, offsets: range, key: bytes) -> None:
        tp = TopicPartition(TOPIC, partition)
        tracker = self.consumer._trackers.setdefault(tp, OffsetTracker())
        for off in offsets:
            tracker.add(off)
            self.consumer._dispatch(_Record(TOPIC, partition, off, key), tracker)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_d14_queued_records_of_a_revoked_partition_never_start() -> None:
    m = _Member()
    m.fetch(0, range(4), b"a")  # p0: one lane, 0 runs, 1-3 queued
    m.fetch(1, range(3), b"b")  # p1: kept, 0 runs, 1-2 queued
    await _settle()
    assert m.started == [(0, 0), (1, 0)] and m.consumer.in_flight == 7

    await m.consumer._on_revoked([P0])
    assert m.consumer.in_flight == 4  # p0's three queued records left; its running one remains
    m.release.set()
    async with asyncio.timeout(5):
        await m.consumer._idle.wait()
    assert m.started == [(0, 0), (1, 0), (1, 1), (1, 2)]  # nothing of p0 after its revocation
    assert m.consumer.in_flight == 0
    await m.consumer._commit()
    assert m.kafka.committed[-1] == {P1: 3}  # p0's finished record moves no offset of its new owner
    assert P0 not in m.consumer._trackers


async def test_d14_a_lane_shared_by_two_partitions_keeps_the_kept_partitions_records_in_order() -> None:
    m = _Member()
    m.fetch(1, range(10, 11), b"k")  # running
    m.fetch(0, range(2), b"k")  # queued behind it in the same key's lane
    m.fetch(1, range(11, 13), b"k")
    await _settle()
    await m.consumer._on_revoked([P0])
    m.release.set()
    async with asyncio.timeout(5):
        await m.consumer._idle.wait()
    assert m.started == [(1, 10), (1, 11), (1, 12)]


async def test_d14_dropping_below_half_resumes_a_paused_consumer() -> None:
    m = _Member(max_in_flight=4)
    m.fetch(0, range(4), b"a")
    m.fetch(1, range(1), b"b")
    m.consumer._paused = True
    await _settle()
    await m.consumer._on_revoked([P0])  # 3 queued dropped: 2 in flight, half of 4
    assert not m.consumer._paused and m.consumer._resume.is_set()
    m.release.set()


async def test_d14_a_stopping_consumer_starts_no_queued_record_and_commits_none_of_them() -> None:
    m = _Member()
    m.fetch(0, range(3), b"a")
    await _settle()

    async def finish_soon() -> None:
        await asyncio.sleep(0.05)
        m.release.set()

    releasing = asyncio.create_task(finish_soon())
    await m.consumer.stop(grace_s=5)
    await releasing
    assert m.started == [(0, 0)]
    assert m.kafka.committed[-1] == {P0: 1}  # the running one finished; 1 and 2 are delivered again


@pytest.mark.parametrize(("offsets", "text"), [([], ""), ([7], "7"), ([3, 4, 5, 9], "3-5,9"), ([2, 1, 3, 8, 7], "1-3,7-8")])
def test_d14_dropped_offsets_are_logged_as_ranges(offsets, text):
    assert _ranges(offsets) == text
