"""Concurrent, key-ordered Kafka consumption with safe offset commits (invariants 1, 3 and 6).

FastStream's subscribers handle one record at a time per subscriber, or acknowledge each record
by committing its own offset, which commits past records still in flight. Threadline's workers
run hundreds of long steps at once, so consumption is this small mechanism over aiokafka:

1. one poll loop fetches batches (``getmany``) and never waits on a handler;
2. each record goes to the *lane* of its key (the thread key): records of one key run one after
   another, in offset order; different keys run concurrently;
3. per partition, an :class:`OffsetTracker` knows which offsets are unfinished; the committed
   position is the lowest unfinished offset, so a commit never passes a record still in flight;
4. when more than ``max_in_flight`` records are unfinished, fetching pauses (backpressure) and
   resumes below half;
5. a handler that raises is logged and the record counted as finished: handlers own their retry
   and dead-lettering (see :func:`threadline.kafka.handling.guarded`), so one bad record never
   stops the partition;
6. on rebalance, finished offsets of revoked partitions are committed; a commit that fails because
   the group moved on is expected and only logged. Records still running for a revoked partition
   finish (their effects are idempotent and fenced) but no longer move its offset;
7. records of a revoked partition fetched or queued in a lane but not started yet are dropped
   at the revocation, never started here: the partition's new owner receives them again from
   the committed offset (decision 222). A stopping consumer drops its not-started records alike.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from aiokafka.structs import OffsetAndMetadata

from threadline.logging import get_logger

log = get_logger(__name__)

Record = Any  # aiokafka ConsumerRecord
Handler = Callable[[Record], Awaitable[None]]


class OffsetTracker:
    """Unfinished offsets of one partition; ``position`` is the next offset safe to commit."""

    __slots__ = ("_done", "_next", "_pending")

    def __init__(self) -> None:
        self._pending: deque[int] = deque()  # offsets in fetch order (increasing)
        self._done: set[int] = set()
        self._next: int | None = None  # committed-safe position

    def add(self, offset: int) -> None:
        """Record that ``offset`` was fetched and is now in flight."""
        if self._next is None:
            self._next = offset
        self._pending.append(offset)

    def finish(self, offset: int) -> None:
        """Record that ``offset`` is finished; advance the position over finished offsets."""
        self._done.add(offset)
        pending, done = self._pending, self._done
        while pending and pending[0] in done:
            off = pending.popleft()
            done.discard(off)
            self._next = off + 1

    @property
    def position(self) -> int | None:
        """Offset to commit (all offsets below it are finished), or ``None`` if nothing yet."""
        return self._next

    @property
    def in_flight(self) -> int:
        return len(self._pending)


def _ranges(offsets: list[int]) -> str:
    """``[3, 4, 5, 9]`` → ``"3-5,9"`` (a log line's offsets, however many)."""
    spans: list[list[int]] = []
    for off in sorted(offsets):
        if spans and off == spans[-1][1] + 1:
            spans[-1][1] = off
        else:
            spans.append([off, off])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka ships no types: its base is Any
    def __init__(self, owner: KeyedConsumer) -> None:
        self._owner = owner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self._owner._on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self._owner._on_assigned(assigned)


LANE_CLEANUP_S = 0.5
"""How long :meth:`KeyedConsumer.stop` waits for the handlers it cancelled after the grace to
finish their clean-up (a processor-worker hands its step back to PostgreSQL) before it commits
and the service goes on to close its connections."""


class KeyedConsumer:
    """Consume ``topics`` in consumer group ``group_id``; call ``handler`` per record.

    Args:
        topics: topics to subscribe to.
        group_id: consumer group (one per service).
        handler: ``async (record) -> None``; exceptions are logged, not raised.
        max_in_flight: unfinished records before fetching pauses.
        commit_interval_s: how often finished offsets are committed.
        fetch_max_wait_ms: how long the broker may hold an empty fetch (ms).
        metadata_max_age_ms: how often (ms) the member refreshes its topics' metadata even when
            nothing failed; a partition set that changed makes the group rebalance, so a member
            that joined while its topics had no partitions to give (a broker just restarted,
            leaders not elected yet) gets them within this time (decision 104; aiokafka's
            default, 5 minutes, left such a group with nothing to consume for that long).
    """

    def __init__(self, *, bootstrap: str, topics: list[str], group_id: str, handler: Handler,
                 client_id: str = "threadline", max_in_flight: int = 2000,
                 commit_interval_s: float = 0.2, session_timeout_ms: int = 10000,
                 max_poll_interval_ms: int = 300000, fetch_max_wait_ms: int = 50, metadata_max_age_ms: int = 5000,
                 security: Mapping[str, object] | None = None) -> None:
        self._topics = topics
        self.group_id = group_id
        self.joined = False
        """True once the group gave this member its first assignment (readiness)."""
        self._handler = handler
        self._max_in_flight = max_in_flight
        self._commit_interval_s = commit_interval_s
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group_id, client_id=client_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=1000,
            max_poll_interval_ms=max_poll_interval_ms, fetch_max_wait_ms=fetch_max_wait_ms,
            metadata_max_age_ms=metadata_max_age_ms, **(security or {}),
        )
        self._trackers: dict[TopicPartition, OffsetTracker] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._lanes: dict[bytes | None, deque[tuple[Record, OffsetTracker]]] = {}
        self._lane_tasks: set[asyncio.Task[None]] = set()
        self._in_flight = 0
        self._paused = False
        self._resume = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._idle = asyncio.Event()
        self._idle.set()

    async def start(self) -> None:
        """Join the group and start the poll and commit loops."""
        await self._consumer.start()
        self._consumer.subscribe(self._topics, listener=_Rebalance(self))
        self._tasks = [asyncio.create_task(self._poll_loop(), name="kafka-poll"),
                       asyncio.create_task(self._commit_loop(), name="kafka-commit")]

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop fetching, let in-flight records finish for up to ``grace_s``, commit, leave."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        dropped = self._drop_queued(None)  # started no more: delivered again to the next owner
        if dropped:
            log.info("records not started dropped at stop; delivered again to the partitions' next owner",
                     count=sum(len(offsets) for offsets in dropped.values()))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), grace_s)
        lanes = list(self._lane_tasks)
        for task in lanes:
            task.cancel()
        if lanes:  # their clean-up (a worker hands its step back) before the service closes its pool
            await asyncio.wait(lanes, timeout=LANE_CLEANUP_S)
        await self._commit()
        await self._consumer.stop()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def _poll_loop(self) -> None:
        while not self._stopping:
            try:
                batches = await self._consumer.getmany(timeout_ms=100, max_records=1000)
            except (KafkaError, IllegalStateError) as exc:
                log.warning("kafka fetch failed; retrying", error=repr(exc))
                await asyncio.sleep(0.5)
                continue
            for tp, records in batches.items():
                tracker = self._trackers.get(tp)
                if tracker is None:
                    tracker = self._trackers[tp] = OffsetTracker()
                for record in records:
                    tracker.add(record.offset)
                    self._dispatch(record, tracker)
            if self._in_flight >= self._max_in_flight and not self._paused:
                self._consumer.pause(*self._consumer.assignment())
                self._paused = True
                self._resume.clear()
                log.info("consumer paused (backpressure)", in_flight=self._in_flight)
            if self._paused:
                await self._resume.wait()

    def _dispatch(self, record: Record, tracker: OffsetTracker) -> None:
        self._in_flight += 1
        self._idle.clear()
        lane = self._lanes.get(record.key)
        if lane is not None:
            lane.append((record, tracker))
            return
        lane = self._lanes[record.key] = deque([(record, tracker)])
        task = asyncio.create_task(self._run_lane(record.key, lane))
        self._lane_tasks.add(task)
        task.add_done_callback(self._lane_tasks.discard)

    async def _run_lane(self, key: bytes | None, lane: deque[tuple[Record, OffsetTracker]]) -> None:
        """Run the lane's records one after another; a lane holds only records not started yet
        (each is taken off before its handler runs), so a revocation can drop them."""
        try:
            while lane:
                record, tracker = lane.popleft()
                try:
                    await self._handler(record)
                except asyncio.CancelledError:  # unfinished: its offset is not committed past
                    raise
                except Exception:
                    log.exception("handler raised; record counted as finished",
                                  topic=record.topic, partition=record.partition, offset=record.offset)
                self._finish(tracker, record.offset)
        finally:
            if self._lanes.get(key) is lane:
                del self._lanes[key]

    def _drop_queued(self, partitions: set[TopicPartition] | None) -> dict[str, list[int]]:
        """Take the not-started records of ``partitions`` (``None``: of every partition) out of
        their lanes, counted as no longer in flight (their offsets stay uncommitted, so they are
        delivered again); returns the dropped offsets by ``topic:partition``."""
        def dropping(record: Record) -> bool:
            return partitions is None or TopicPartition(record.topic, record.partition) in partitions

        dropped: dict[str, list[int]] = {}
        for lane in self._lanes.values():
            gone = [r for r, _ in lane if dropping(r)]
            if not gone:
                continue
            kept = [(r, t) for r, t in lane if not dropping(r)]
            lane.clear()
            lane.extend(kept)
            for r in gone:
                dropped.setdefault(f"{r.topic}:{r.partition}", []).append(r.offset)
        count = sum(len(offsets) for offsets in dropped.values())
        if count:
            self._in_flight -= count
            self._released()
        return dropped

    def _finish(self, tracker: OffsetTracker, offset: int) -> None:
        # the tracker captured at fetch time: after a revocation it is an orphan and finishing
        # on it moves no offset of the partition's new owner
        self._in_flight -= 1
        tracker.finish(offset)
        self._released()

    def _released(self) -> None:
        """After records left the in-flight count: resume fetching below half, mark idle at 0."""
        if self._paused and not self._stopping and self._in_flight <= self._max_in_flight // 2:
            assigned = self._consumer.assignment()
            if assigned:
                self._consumer.resume(*assigned)
            self._paused = False
            self._resume.set()
        if self._in_flight == 0:
            self._idle.set()

    async def _commit_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self._commit_interval_s)
            await self._commit()

    async def _commit(self, only: list[TopicPartition] | None = None) -> None:
        offsets = {}
        for tp, tracker in list(self._trackers.items()):
            if only is not None and tp not in only:
                continue
            pos = tracker.position
            if pos is not None and self._committed.get(tp) != pos:
                offsets[tp] = OffsetAndMetadata(pos, "")
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
            for tp, om in offsets.items():
                self._committed[tp] = om.offset
        except (CommitFailedError, IllegalStateError) as exc:
            log.info("offset commit rejected (rebalance in progress); will be redelivered",
                     error=repr(exc))
        except KafkaError as exc:
            log.warning("offset commit failed; retrying later", error=repr(exc))

    async def _on_revoked(self, revoked: list[TopicPartition]) -> None:
        dropped = self._drop_queued(set(revoked))
        if dropped:
            log.info("records of revoked partitions dropped before they started; their new owner gets them",
                     dropped={tp: _ranges(offsets) for tp, offsets in sorted(dropped.items())},
                     count=sum(len(offsets) for offsets in dropped.values()))
        await self._commit(only=list(revoked))
        for tp in revoked:
            self._trackers.pop(tp, None)
            self._committed.pop(tp, None)

    def lag(self) -> dict[tuple[str, int], int]:
        """Records not yet committed per assigned ``(topic, partition)``: the high watermark of
        the last fetch minus the committed (or first fetched) offset; partitions not fetched from
        yet are left out."""
        out: dict[tuple[str, int], int] = {}
        for tp, tracker in list(self._trackers.items()):
            high = self._consumer.highwater(tp)
            done = self._committed.get(tp, tracker.position)
            if high is not None and done is not None:
                out[(tp.topic, tp.partition)] = max(0, high - done)
        return out

    def _on_assigned(self, assigned: list[TopicPartition]) -> None:
        self.joined = True
        log.info("partitions assigned", partitions=sorted(f"{tp.topic}:{tp.partition}" for tp in assigned))
        for tp in assigned:
            self._trackers.setdefault(tp, OffsetTracker())
        if self._paused:
            self._consumer.pause(*assigned)
