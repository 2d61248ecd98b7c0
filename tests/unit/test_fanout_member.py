"""The fan-out reader's decisions between two fetches (threadline.kafka.fanout), on a recording
stand-in for the consumer: which batch a stream takes, where the partition is sought, what is
paused, how a re-created topic is read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from threadline.kafka.fanout import FanoutStream, _Member

TP = TopicPartition("t", 0)


@dataclass
class _Record:
    offset: int


class _Consumer:
    """Records ``assign`` / ``seek`` / ``pause`` / ``resume``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def assign(self, tps: list[TopicPartition]) -> None:
        self.calls.append(("assign", sorted(tp.topic for tp in tps)))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.calls.append(("seek", tp.topic, offset))

    def pause(self, *tps: TopicPartition) -> None:
        self.calls.append(("pause", *[tp.topic for tp in tps]))

    def resume(self, *tps: TopicPartition) -> None:
        self.calls.append(("resume", *[tp.topic for tp in tps]))


def _member() -> tuple[_Member, _Consumer, list[int]]:
    consumer = _Consumer()
    removed: list[int] = []
    return _Member(consumer, "test", lambda: removed.append(1)), consumer, removed  # type: ignore[arg-type]


def _batch(lo: int, hi: int) -> list[_Record]:
    return [_Record(o) for o in range(lo, hi)]


def _taken(stream: FanoutStream) -> list[int]:
    return [r.offset for r in stream._queue]


def test_a_stream_that_needs_earlier_records_takes_no_batch_fetched_before_the_seek_back() -> None:
    member, consumer, _ = _member()
    live = FanoutStream(member, TP, 5, 100)
    member.add(live)
    member.apply()
    assert consumer.calls == [("assign", ["t"]), ("seek", "t", 5)]
    member.deliver(TP, _batch(5, 8))
    early = FanoutStream(member, TP, 0, 100)
    member.add(early)
    member.deliver(TP, _batch(8, 10))  # fetched before the loop sought back for it
    assert _taken(early) == []
    member.apply()
    assert consumer.calls[-1] == ("seek", "t", 0)
    member.deliver(TP, _batch(0, 11))
    assert _taken(early) == list(range(11))
    assert _taken(live) == list(range(5, 11))  # 5..9 once, then 10


def test_a_full_stream_is_detached_the_partition_paused_when_all_are_then_read_again() -> None:
    member, consumer, _ = _member()
    slow = FanoutStream(member, TP, 0, 4)
    member.add(slow)
    member.apply()
    member.deliver(TP, _batch(0, 6))
    assert slow.detached and _taken(slow) == [0, 1, 2, 3]
    member.apply()
    assert consumer.calls[-1] == ("pause", "t")
    slow._queue.popleft()
    slow._queue.popleft()
    slow.detached = False  # what __anext__ does at half the queue
    member.apply()
    assert consumer.calls[-2:] == [("seek", "t", 4), ("resume", "t")]


def test_a_batch_below_the_position_is_a_re_created_topic_read_from_its_start() -> None:
    member, _, _ = _member()
    stream = FanoutStream(member, TP, 57, 100)
    member.add(stream)
    member.apply()
    member.deliver(TP, _batch(0, 2))  # the broker reset an out-of-range position to the earliest
    assert _taken(stream) == [0, 1]


async def test_closing_the_last_stream_of_a_partition_unassigns_it() -> None:
    member, consumer, removed = _member()
    a, b = FanoutStream(member, TP, 0, 10), FanoutStream(member, TopicPartition("u", 0), 0, 10)
    member.add(a)
    member.add(b)
    member.apply()
    await a.close()
    await a.close()
    member.apply()
    assert ("assign", ["u"]) in consumer.calls and removed == [1]
