"""The shared chunk layout's pure parts: the partitioner every writer shares, where a thread's
chunks are, the settings, and the readers' filter by thread (the fan-out stream, the
subscription's own consumer). docs/decisions.md#shared-chunk-layout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.partitioner import DefaultPartitioner
from pydantic import ValidationError

from threadline.client.subscription import ThreadSubscription
from threadline.config import Settings
from threadline.errors import ConfigurationError
from threadline.gateway.streaming import Position, event_id, parse_event_id, resumed_in
from threadline.kafka.chunk_writer import ChunkWriter
from threadline.kafka.fanout import FanoutStream, _Member
from threadline.kafka.layout import chunk_partition, chunk_place, ensure_shared_chunks
from threadline.topics import Topics, thread_key

pytestmark = pytest.mark.unit

SHARED = Topics("tl", "shared")
PER_THREAD = Topics("tl")


def test_the_partition_is_the_one_kafkas_default_partitioner_gives_the_thread_key() -> None:
    # the outbox relay and plain Kafka clients leave the partition to the producer's partitioner;
    # the chunk writer names it: both must land a thread's chunks on one partition
    for partitions in (1, 2, 7, 16, 100):
        for i in range(300):
            key = thread_key(f"res-{i % 13}", f"thread/{i}").encode()
            assert chunk_partition(key, partitions) == DefaultPartitioner()(key, list(range(partitions)), [])


def test_threads_spread_over_the_partitions() -> None:
    hits = {chunk_partition(thread_key("r", f"t-{i}").encode(), 16) for i in range(400)}
    assert hits == set(range(16))


def test_no_partition_count_below_one() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        chunk_partition(b"r:t", 0)


def test_the_per_thread_layout_is_unchanged() -> None:
    place = chunk_place(PER_THREAD, 16, "res-1", "th-1")
    assert place.topic == PER_THREAD.thread_chunks("res-1", "th-1") == PER_THREAD.chunks("res-1", "th-1")
    assert place.topic.startswith("tl.chunks.res-1.th-1.")
    assert (place.partition, place.shared, place.only_key) == (0, False, None)


def test_the_shared_layout_puts_every_thread_on_one_topic_by_its_key() -> None:
    a, b = chunk_place(SHARED, 16, "res-1", "th-1"), chunk_place(SHARED, 16, "res-1", "th-2")
    assert a.topic == b.topic == SHARED.shared_chunks == SHARED.chunks("res-1", "th-1") == "tl.chunks-shared"
    assert a.key == b"res-1:th-1" and a.only_key == a.key and a.shared
    assert a.partition == chunk_partition(b"res-1:th-1", 16)
    # never a per-thread name: the relay's topic taking, the idle-topic sweep and `topics --chunks`
    # look at "<prefix>.chunks." only
    assert not a.topic.startswith("tl.chunks.")


def test_the_layout_comes_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().chunk_layout == "per-thread"
    monkeypatch.setenv("THREADLINE_CHUNK_LAYOUT", "shared")
    monkeypatch.setenv("THREADLINE_CHUNK_PARTITIONS", "5")
    settings = Settings()
    assert (settings.chunk_layout, settings.chunk_partitions) == ("shared", 5)
    assert Topics.of(settings).shared_layout
    monkeypatch.setenv("THREADLINE_CHUNK_LAYOUT", "per-partition")
    with pytest.raises(ValidationError):
        Settings()
    monkeypatch.setenv("THREADLINE_CHUNK_LAYOUT", "shared")
    monkeypatch.setenv("THREADLINE_CHUNK_PARTITIONS", "0")
    with pytest.raises(ValidationError):
        Settings()


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int | None, bytes | None]] = []

    async def send_raw(self, topic: str, value: bytes, *, key: Any = None, headers: Any = None,
                       partition: int | None = None) -> asyncio.Future[Any]:
        self.sent.append((topic, partition, key))
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


async def test_the_writer_sends_to_the_threads_partition_and_its_parents_for_the_mirror() -> None:
    own, up = chunk_place(SHARED, 16, "r", "child"), chunk_place(SHARED, 16, "r", "parent")
    producer = _Producer()
    writer = ChunkWriter(producer, own.topic, run_id="run-1", step=0, attempt=1, seq=0,  # type: ignore[arg-type]  # a fake producer
                         key=own.key.decode(), partition=own.partition)
    writer.mirror = (up.topic, up.partition, up.key, {"toolCallId": "c1", "toolName": "agent-x"})
    await writer.emit({"type": "text-delta", "payload": {"text": "hi"}})
    assert producer.sent == [(own.topic, own.partition, own.key), (up.topic, up.partition, up.key)]


@dataclass
class _Record:
    offset: int
    key: bytes | None
    value: bytes = b"{}"
    headers: list[tuple[str, bytes]] = field(default_factory=list)


def test_a_fan_out_stream_takes_only_its_threads_records_and_moves_past_the_others() -> None:
    member = _Member(_NoConsumer(), "test", lambda: None)  # type: ignore[arg-type]  # deliver asks nothing of it
    tp = TopicPartition("tl.chunks-shared", 3)
    mine = FanoutStream(member, tp, 0, 4, key=b"r:a")
    other = FanoutStream(member, tp, 0, 4, key=b"r:b")
    member.add(mine)
    member.add(other)
    # far more of another thread's records than a queue holds: they never detach this stream
    batch = [_Record(i, b"r:b") for i in range(10)] + [_Record(10, b"r:a"), _Record(11, b"r:b"), _Record(12, b"r:a")]
    member.deliver(tp, batch)  # type: ignore[arg-type]  # records need offset and key only
    assert [r.offset for r in mine._queue] == [10, 12] and not mine.detached
    assert mine.next_offset == 13
    assert other.detached  # its own traffic filled its queue: detached as before


class _NoConsumer:
    pass


class _Source:
    def __init__(self, records: list[_Record]) -> None:
        self.records = records

    def __aiter__(self) -> AsyncIterator[_Record]:
        return self._each()

    async def _each(self) -> AsyncIterator[_Record]:
        for record in self.records:
            yield record


def _chunk(run_id: str, seq: int, text: str) -> bytes:
    return orjson.dumps({"type": "text-delta", "runId": run_id, "step": 0, "attempt": 1, "seq": seq,
                         "payload": {"text": text}})


async def test_a_subscription_of_its_own_delivers_no_record_of_another_thread() -> None:
    sub = ThreadSubscription("unused:9092", "tl.chunks-shared", partition=3, key=b"r:a")
    # the same run id and seq on another thread: neither shown nor taken for a duplicate
    sub._consumer = _Source([_Record(0, b"r:b", _chunk("run-1", 0, "theirs")),  # type: ignore[assignment]  # iterated only
                             _Record(1, b"r:a", _chunk("run-1", 0, "mine")),
                             _Record(2, b"r:b", _chunk("run-2", 0, "theirs"))])
    got = [chunk async for chunk in sub.stream]
    assert [c["payload"]["text"] for c in got] == ["mine"]  # type: ignore[typeddict-item]
    assert sub.last_offset == 1 and sub.cursor() == {"run-1": 0}


def test_a_shared_layout_event_id_names_its_partition_and_round_trips() -> None:
    chunk = {"runId": "run_1:x", "seq": 7, "type": "text-delta"}
    assert event_id(42, chunk) == "42:7:run_1:x"  # the per-thread layout's ids are unchanged
    assert event_id(42, chunk, 3) == "3/42:7:run_1:x"
    assert parse_event_id("3/42:7:run_1:x") == Position(42, 7, "run_1:x", 3)
    assert parse_event_id("42:7:run_1:x") == Position(42, 7, "run_1:x", None)
    for bad in ("x/42:1:r", "/42:1:r", "3/-1:1:r", "3/x:1:r", "-3/4:1:r"):
        with pytest.raises(ValueError):
            parse_event_id(bad)


def test_a_position_of_the_other_layout_or_partition_starts_the_stream_over() -> None:
    bare, on_3 = Position(42), Position(42, partition=3)
    assert resumed_in(bare, None) == bare and resumed_in(bare, 3) == bare  # a bare offset: this stream's
    assert resumed_in(on_3, 3) == on_3
    assert resumed_in(on_3, 5) is None  # another partition's offset names nothing here
    assert resumed_in(on_3, None) is None  # a shared-layout id at a per-thread gateway
    assert resumed_in(None, 3) is None


class _Admin:
    """Records what ``ensure_shared_chunks`` asks; the broker holds ``held`` partitions of the topic."""

    def __init__(self, held: int) -> None:
        self.held = held
        self.asked: list[tuple[str, list[str], int | None]] = []

    async def ensure(self, topics: list[str], *, partitions: int = 1, config: dict[str, str] | None = None) -> set[str]:
        self.asked.append(("ensure", topics, partitions))
        return set()

    async def wait_leaders(self, topics: list[str]) -> list[str]:
        return []

    async def partition_count(self, topic: str) -> int:
        self.asked.append(("count", [topic], None))
        return self.held


async def test_the_shared_topic_is_made_at_start_and_another_partition_count_refused() -> None:
    admin = _Admin(held=16)
    await ensure_shared_chunks(admin, SHARED, partitions=16, retention_ms=1000)  # type: ignore[arg-type]  # a fake admin
    assert admin.asked == [("ensure", ["tl.chunks-shared"], 16), ("count", ["tl.chunks-shared"], None)]
    with pytest.raises(ConfigurationError, match="has 16 partitions, THREADLINE_CHUNK_PARTITIONS says 8"):
        await ensure_shared_chunks(admin, SHARED, partitions=8, retention_ms=1000)  # type: ignore[arg-type]  # a fake admin
    nothing = _Admin(held=0)
    await ensure_shared_chunks(nothing, PER_THREAD, partitions=16, retention_ms=1000)  # type: ignore[arg-type]  # a fake admin
    assert nothing.asked == []  # the per-thread layout makes its topics on first use, as before
