"""A fan-out reader: a fixed number of Kafka consumers serving any number of streams.

A *stream* is the records of one topic-partition from a position: a thread's chunk topic,
partition 0, or, in the shared layout, the shared chunk topic's partition of the thread, each
stream keeping only the records keyed by its thread (``key``: the others advance its position
and are never queued, so another thread's traffic never fills its queue). Each stream used to
be an ``AIOKafkaConsumer`` of its own: a gateway with 10,000 open browsers held 10,000
consumers, their connections and fetch loops. Here:

1. :meth:`FanoutReader.open` fixes the stream's start position with a ``ListOffsets`` request
   before it returns (the end, the beginning, an offset, a time, or 0 for a topic just made), so
   every record at or after it reaches the stream (guarantee B16);
2. the topic-partition goes to one of ``consumers`` consumers (by a hash of the topic), which
   reads the union of its streams' partitions (``assign``) from the lowest position any of them
   still needs, seeking back when a stream needs an earlier one; each stream keeps its own next
   offset, so it gets every record from its start once, and none before it;
3. records go to per-stream bounded queues; a stream whose queue is full is *detached* — the
   others on its partition go on — and reattached when its reader drained half of it, the
   partition then read again from that stream's own position (a slow stream costs re-reads of
   what it missed, never a delay or a loss to the others); a partition whose every stream is
   detached is paused;
4. a position the broker no longer has (the topic was deleted and made again: decision 41)
   resets to the earliest offset, and every stream of that partition then reads the new topic
   from there;
5. closing a stream unassigns its partition when no other stream reads it.

Changes of assignment and seeks happen only in the consumer's own loop, between two ``getmany``
calls, so a batch fetched before a seek is never taken for one fetched after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from threadline.logging import get_logger

log = get_logger(__name__)

Record = Any  # aiokafka ConsumerRecord

FETCH_WAIT_MS = 100
"""How long (ms) the broker may hold a fan-out consumer's fetch while its partitions have
nothing new. A record that arrives ends the wait at once; the wait bounds how soon a partition
assigned or sought meanwhile is fetched. The consumers are few, so asking often costs little."""
QUEUE_RECORDS = 1000
"""Records a stream may hold unread before it is detached (its reader is slow)."""
RETRY_AFTER_S = 5
"""What a refusal at capacity tells the caller to wait (seconds) before it asks again."""


class ReaderFullError(Exception):
    """The reader serves ``max_streams`` streams already; ``retry_after_s``: when to ask again."""

    def __init__(self, max_streams: int, retry_after_s: int = RETRY_AFTER_S) -> None:
        super().__init__(f"this reader serves its maximum of {max_streams} streams; retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True, kw_only=True)
class StartAt:
    """Where a stream starts (first that applies): ``offset``; the first record at or after
    ``time_ms`` (the end when none); 0 when ``new_topic`` (made after the stream was asked for,
    so all in it came later: decision 101); the beginning; else the end."""

    offset: int | None = None
    time_ms: int | None = None
    new_topic: bool = False
    beginning: bool = False


class FanoutStream:
    """The records of one topic-partition from ``start_offset`` on, in offset order, each once;
    an async iterator that ends when the stream or its reader is closed.

    Attributes:
        tp: the topic-partition read; ``start_offset``: fixed before :meth:`FanoutReader.open`
            returned; ``next_offset``: the next offset it takes; ``detached``: its queue is full.
    """

    __slots__ = ("_limit", "_member", "_queue", "_ready", "closed", "detached", "key", "next_offset",
                 "start_offset", "tp")

    def __init__(self, member: _Member, tp: TopicPartition, start: int, limit: int, key: bytes | None = None) -> None:
        self._member = member
        self.tp = tp
        self.key = key
        self.start_offset = start
        self.next_offset = start
        self._limit = max(2, limit)
        self._queue: deque[Record] = deque()
        self._ready = asyncio.Event()
        self.closed = False
        self.detached = False

    def __aiter__(self) -> FanoutStream:
        return self

    async def __anext__(self) -> Record:
        while not self._queue:
            if self.closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()
        record = self._queue.popleft()
        if self.detached and len(self._queue) <= self._limit // 2:
            self.detached = False  # read again from next_offset: the consumer seeks back to it
            self._member.changed()
        return record

    def offer(self, record: Record) -> None:
        """Take ``record`` if it is the next this stream needs and it is attached; one of another
        key than the stream's (``key`` set) only moves the position past it."""
        if self.detached or record.offset < self.next_offset:
            return
        if self.key is not None and record.key != self.key:
            self.next_offset = record.offset + 1
            return
        self._queue.append(record)
        self.next_offset = record.offset + 1
        self._ready.set()
        if len(self._queue) >= self._limit:
            self.detached = True
            self._member.changed()

    def end(self) -> None:
        self.closed = True
        self._ready.set()

    async def close(self) -> None:
        """Stop the stream (idempotent); its partition is unassigned when no other stream reads it."""
        if not self.closed:
            self.end()
            self._member.remove(self)


class _Partition:
    __slots__ = ("next", "streams")

    def __init__(self) -> None:
        self.streams: set[FanoutStream] = set()
        self.next: int | None = None  # the consumer's position as this reader set or read it


class _Member:
    """One consumer of the reader and the partitions it reads."""

    def __init__(self, consumer: AIOKafkaConsumer, name: str, on_removed: Callable[[], None]) -> None:
        self.consumer = consumer
        self._on_removed = on_removed
        self.parts: dict[TopicPartition, _Partition] = {}
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._paused: set[TopicPartition] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._name = name

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for part in self.parts.values():
            for stream in part.streams:
                stream.end()
        self.parts.clear()
        with contextlib.suppress(Exception):
            await self.consumer.stop()

    def changed(self) -> None:
        self._wake.set()

    def add(self, stream: FanoutStream) -> None:
        self.parts.setdefault(stream.tp, _Partition()).streams.add(stream)
        self._wake.set()

    def remove(self, stream: FanoutStream) -> None:
        self._on_removed()
        part = self.parts.get(stream.tp)
        if part is not None:
            part.streams.discard(stream)
            if not part.streams:
                del self.parts[stream.tp]
        self._wake.set()

    def apply(self) -> None:
        """Assign the partitions streams read, seek where a stream needs an earlier offset, pause
        the partitions whose every stream is detached (only here, between two fetches)."""
        consumer = self.consumer
        wanted = frozenset(self.parts)
        if wanted != self._assigned:
            consumer.assign(list(wanted))  # aiokafka replaces the assignment: every position is set again
            self._assigned = wanted
            self._paused = set()
            for tp, part in self.parts.items():
                if part.next is not None:
                    consumer.seek(tp, part.next)
        pause, resume = [], []
        for tp, part in self.parts.items():
            attached = [s.next_offset for s in part.streams if not s.detached]
            if not attached:
                pause.append(tp)
                continue
            low = min(attached)
            if part.next is None or low < part.next:
                consumer.seek(tp, low)
                part.next = low
            if tp in self._paused:
                resume.append(tp)
        if pause:
            consumer.pause(*pause)
        if resume:
            consumer.resume(*resume)
        self._paused = set(pause)

    def deliver(self, tp: TopicPartition, records: list[Record]) -> None:
        """Hand a fetched batch to the partition's streams."""
        part = self.parts.get(tp)
        if part is None or not records:
            return
        first = records[0].offset
        if part.next is not None and first < part.next:
            # the position was out of range and reset to the earliest: the topic was deleted and
            # made again (decision 41); its streams read the new topic from its start
            log.info("chunk topic read again from its start", topic=tp.topic, offset=first, was=part.next)
            for stream in part.streams:
                stream.next_offset = min(stream.next_offset, first)
            part.next = first
        position = first if part.next is None else part.next
        part.next = records[-1].offset + 1
        for stream in list(part.streams):
            if stream.next_offset < position:
                continue  # it needs records before this batch (it came or was attached since): sought next
            for record in records:
                stream.offer(record)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            self.apply()
            if not self.parts:
                await self._wake.wait()
                continue
            fetch = asyncio.ensure_future(self.consumer.getmany(timeout_ms=1000, max_records=2000))
            woke = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait({fetch, woke}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                woke.cancel()
                if not fetch.done():
                    fetch.cancel()  # nothing drained yet: the records stay in the fetcher
                    await asyncio.wait({fetch})
            if fetch.cancelled():
                continue
            try:
                batches = fetch.result()
            except (KafkaError, OSError) as exc:
                log.warning("fan-out fetch failed; retrying", error=repr(exc))
                await asyncio.sleep(0.5)
                continue
            for tp, records in batches.items():
                self.deliver(tp, records)


class FanoutReader:
    """Any number of streams over ``consumers`` Kafka consumers (see the module).

    Args:
        bootstrap: the brokers; ``security``: aiokafka TLS/SASL keyword arguments.
        consumers: how many consumers (each a connection per broker and one fetch loop).
        queue_records: records a stream may hold unread before it is detached.
        max_streams: open streams at most (``None``: no bound); :meth:`open` refuses beyond.
    """

    def __init__(self, bootstrap: str, *, consumers: int = 1, queue_records: int = QUEUE_RECORDS,
                 max_streams: int | None = None, security: Mapping[str, object] | None = None) -> None:
        if consumers < 1:
            raise ValueError("a fan-out reader needs at least one consumer")
        self._bootstrap = bootstrap
        self._security = dict(security or {})
        self._count = consumers
        self._queue_records = queue_records
        self.max_streams = max_streams
        self._members: list[_Member] = []
        self._open = 0
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"FanoutReader({self._bootstrap!r}, consumers={self._count}, streams={self._open})"

    @property
    def open_streams(self) -> int:
        """Streams open now."""
        return self._open

    @property
    def full(self) -> bool:
        """The reader serves its ``max_streams`` streams already (never with no bound)."""
        return self.max_streams is not None and self._open >= self.max_streams

    @property
    def consumers(self) -> int:
        """Kafka consumers this reader holds (started or not): constant, whatever the streams."""
        return self._count

    async def start(self) -> None:
        """Start the consumers (idempotent)."""
        async with self._lock:
            if self._members:
                return
            members = []
            try:
                for i in range(self._count):
                    # "earliest": a position past a re-created topic's end reads it from its start (decision 41)
                    consumer = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, enable_auto_commit=False,
                                                group_id=None, fetch_max_wait_ms=FETCH_WAIT_MS,
                                                auto_offset_reset="earliest", client_id=f"threadline-fanout-{i}",
                                                **self._security)
                    await consumer.start()
                    members.append(_Member(consumer, f"fanout-{i}", self._closed))
            except BaseException:
                for member in members:
                    await member.stop()
                raise
            for member in members:
                member.start()
            self._members = members

    async def stop(self) -> None:
        """End every stream and stop the consumers (idempotent)."""
        members, self._members = self._members, []
        for member in members:
            await member.stop()
        self._open = 0

    async def open(self, topic: str, start: StartAt, *, partition: int = 0, key: bytes | None = None) -> FanoutStream:
        """A stream of ``topic``'s ``partition`` from ``start``, fixed before this returns; with
        ``key``, only the records keyed so (a thread's, on a shared chunk topic).

        Raises:
            ReaderFullError: ``max_streams`` streams are open.
            KafkaError: the start position could not be asked of the broker.
        """
        if self.full:
            raise ReaderFullError(self.max_streams or 0)
        await self.start()
        tp = TopicPartition(topic, partition)
        # by topic and partition: a shared chunk topic's partitions spread over the consumers
        member = self._members[zlib.crc32(f"{topic}:{partition}".encode()) % len(self._members)]
        self._open += 1
        try:
            position = await _position(member.consumer, tp, start)
        except BaseException:
            self._open -= 1
            raise
        stream = FanoutStream(member, tp, position, self._queue_records, key)
        member.add(stream)
        return stream

    def _closed(self) -> None:
        self._open = max(0, self._open - 1)


async def _position(consumer: AIOKafkaConsumer, tp: TopicPartition, start: StartAt) -> int:
    """The offset ``start`` names on ``tp`` (one ``ListOffsets`` request, or none)."""
    if start.offset is not None:
        return start.offset
    if start.time_ms is not None:
        # the end first: a record appended between the two asks is then read, not skipped
        end: int = (await consumer.end_offsets([tp]))[tp]
        found = (await consumer.offsets_for_times({tp: start.time_ms}))[tp]
        return found.offset if found is not None else end
    if start.new_topic:
        return 0
    if start.beginning:
        first: int = (await consumer.beginning_offsets([tp]))[tp]
        return first
    last: int = (await consumer.end_offsets([tp]))[tp]
    return last
