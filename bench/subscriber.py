"""One Kafka consumer following many chunk topics (one partition each), recording when each
chunk arrived. A bench subscribes to hundreds of threads from this one consumer instead of one
``ThreadSubscription`` per thread.

Receive times are ``time.perf_counter()`` taken once per fetched batch. ``lag_ms`` holds, per
record, receive wall time minus the record's Kafka timestamp (the producer's create time): if
the subscriber fell behind, this lag would grow with the run, so it shows whether the
subscriber side was a bottleneck.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition


@dataclass(slots=True)
class Received:
    t: float
    """``time.perf_counter()`` when the record's batch was fetched."""
    chunk: dict[str, Any]
    size: int
    """Bytes of the record's value."""
    ts_ms: float = 0.0
    """The record's Kafka timestamp (the producer's create time), ms since the epoch."""
    wall_ms: float = 0.0
    """``time.time()`` (ms) when the record's batch was fetched."""


class ChunkSubscriber:
    """Follows the topics given to :meth:`watch`, from their end."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._assigned: set[str] = set()
        self.by_topic: dict[str, list[Received]] = defaultdict(list)
        self._events: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.lag_ms: list[float] = []
        self.records = 0

    async def start(self) -> None:
        self._consumer = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, group_id=None,
                                          enable_auto_commit=False, fetch_max_wait_ms=10)
        await self._consumer.start()

    async def stop(self) -> None:
        await self._halt()
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def _halt(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def watch(self, topics: list[str]) -> None:
        """Add ``topics`` (existing, single-partition) to the assignment, positioned at their end."""
        assert self._consumer is not None
        new = [t for t in topics if t not in self._assigned]
        if not new:
            return
        await self._halt()
        self._assigned.update(new)
        self._consumer.assign([TopicPartition(t, 0) for t in sorted(self._assigned)])
        tps = [TopicPartition(t, 0) for t in new]
        await self._consumer.seek_to_end(*tps)
        for tp in tps:
            await self._consumer.position(tp)
        self._task = asyncio.create_task(self._loop(), name="chunk-subscriber")

    def reset(self) -> None:
        """Forget what was received (the assignment stays)."""
        self.by_topic.clear()
        self.lag_ms.clear()
        self.records = 0

    async def _loop(self) -> None:
        assert self._consumer is not None
        consumer, by_topic, events, lag, loads = self._consumer, self.by_topic, self._events, self.lag_ms, orjson.loads
        while True:
            batch = await consumer.getmany(timeout_ms=100, max_records=5000)
            now, wall_ms = time.perf_counter(), time.time() * 1000
            for tp, records in batch.items():
                got = by_topic[tp.topic]
                for r in records:
                    got.append(Received(now, loads(r.value), len(r.value), r.timestamp, wall_ms))
                    lag.append(wall_ms - r.timestamp)
                self.records += len(records)
                events[tp.topic].set()

    async def wait(self, topic: str, match: Callable[[dict[str, Any]], bool], *, start: int = 0,
                   timeout_s: float = 60) -> tuple[int, Received]:
        """First record at or after index ``start`` of ``topic`` whose chunk matches; returns
        ``(index, record)``. Raises ``TimeoutError``."""
        deadline = time.monotonic() + timeout_s
        i = start
        while True:
            got = self.by_topic[topic]
            while i < len(got):
                if match(got[i].chunk):
                    return i, got[i]
                i += 1
            event = self._events[topic]
            event.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching chunk on {topic}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), min(left, 1.0))


def is_type(kind: str) -> Callable[[dict[str, Any]], bool]:
    return lambda chunk: chunk.get("type") == kind
