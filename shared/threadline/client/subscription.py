"""``subscribe_to_thread``: follow a thread's chunk topic, run after run (Mastra's
``subscribeToThread``). Duplicates are dropped by ``(runId, seq)`` and chunks of attempts
declared dead (``attempt-discarded``) are dropped, so the stream shows every chunk once.

In the shared chunk layout (:mod:`threadline.kafka.layout`) the subscription reads the thread's
partition of the shared topic and keeps only the records keyed by the thread: a record of another
thread is never delivered; offsets are that partition's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition

from threadline.client.active import Delivered, hidden_echo
from threadline.errors import InvalidEventError
from threadline.events.chunk_types import ChunkBody, ChunkKind, ChunkParseError, known, parse_chunk
from threadline.kafka.fanout import FanoutReader, FanoutStream, StartAt
from threadline.kafka.payloads import PayloadRefs, resolve
from threadline.logging import get_logger

log = get_logger(__name__)

IDLE_FETCH_WAIT_MS = 500
"""How long (ms) the broker may hold a client consumer's fetch while its partitions have nothing
new (aiokafka ``fetch_max_wait_ms``; Kafka's own default): a record that arrives ends the wait at
once, so it bounds no delivery; it bounds how often an idle subscription asks. Each subscription
and each client's reply listener is a consumer of its own, so a gateway with many open streams
holds many: at 10 ms each asked 100 times a second (``python -m bench.idle_subscriptions``).
A subscription given a :class:`~threadline.kafka.fanout.FanoutReader` has no consumer of its own."""


class ThreadSubscription:
    """Chunks of one thread.

    Attributes:
        stream: async iterator of chunk dicts (``type``, ``runId``, ``step``, ``attempt``,
            ``seq``, ``payload``…), in topic order, without duplicates or dead attempts (an
            ``attempt-discarded {step, attempt}`` declares that attempt and every earlier
            attempt of the step dead: a later attempt exists only because they died).

    With ``reader`` (a started or unstarted :class:`~threadline.kafka.fanout.FanoutReader`) the
    chunks come from that process-wide reader's consumers instead of a consumer of its own.

    ``partition`` is the partition of ``topic`` read (0 for a per-thread topic); with ``key``
    (the thread key, on a shared chunk topic) only the records keyed so are read, and offsets
    (``from_offset``, ``start_offset``, ``last_offset``) are that partition's.
    """

    def __init__(self, bootstrap: str, topic: str, *, from_beginning: bool = False,
                 from_offset: int | None = None, from_time_ms: int | None = None,
                 on_abort: Callable[[], Awaitable[bool]] | None = None,
                 on_active: Callable[[], Awaitable[str | None]] | None = None,
                 after: dict[str, int] | None = None, hide_signals: bool | list[str] = False,
                 payloads: PayloadRefs | None = None, security: Mapping[str, object] | None = None,
                 reader: FanoutReader | None = None, partition: int = 0, key: bytes | None = None) -> None:
        self._reader = reader
        self._partition = partition
        self.key = key
        self._shared: FanoutStream | None = None
        self._on_abort = on_abort
        self._on_active = on_active
        self._from_time_ms = from_time_ms
        self._security = dict(security or {})
        self._payloads = payloads
        self._hide = hide_signals
        self._bootstrap = bootstrap
        self.topic = topic
        self._from_beginning = from_beginning
        self._from_offset = from_offset
        self._consumer: AIOKafkaConsumer | None = None
        self._delivered = Delivered(after)
        self._dead: dict[tuple[str, int], int] = {}  # (run, step) → highest dead attempt
        self.last_offset: int | None = None
        self.start_offset: int | None = None
        """The topic offset the subscription started at, fixed before ``start`` returns: every
        chunk at or after it is seen; a ``from_offset`` re-read below it gives what came before."""

    async def connect(self) -> None:
        """Start the subscription's consumer (its connection to the cluster) without reading yet:
        :meth:`start` does it when not done; the client does it while the topic is being made.
        With a fan-out reader: starts the reader (once per process)."""
        if self._reader is not None:
            await self._reader.start()
            return
        if self._consumer is not None:
            return
        # "earliest": when the idle-topic sweep deleted the topic and a new run created it again,
        # this subscription's position lies past the new topic's end (out of range): it then reads
        # the new topic from its start, i.e. the new run's chunks from the first (decision 41)
        consumer = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, enable_auto_commit=False,
                                    group_id=None, fetch_max_wait_ms=IDLE_FETCH_WAIT_MS, auto_offset_reset="earliest",
                                    **self._security)
        await consumer.start()
        self._consumer = consumer

    async def start(self, *, new_topic: bool = False) -> None:
        """Fix the position the subscription reads from (before it returns: B16).

        ``new_topic``: the caller created the topic after this subscription was asked for (so
        everything in it came later): without ``from_offset`` or ``from_time_ms`` it reads from
        offset 0, without asking the broker for the end (decision 101).
        """
        if self._reader is not None:
            self._shared = await self._reader.open(self.topic, StartAt(
                offset=self._from_offset, time_ms=self._from_time_ms, new_topic=new_topic,
                beginning=self._from_beginning), partition=self._partition, key=self.key)
            self.start_offset = self._shared.start_offset  # fixed by open (B16)
            return
        await self.connect()
        consumer = self._consumer
        assert consumer is not None
        tp = TopicPartition(self.topic, self._partition)
        consumer.assign([tp])
        if self._from_offset is not None:
            consumer.seek(tp, self._from_offset)
        elif self._from_time_ms is not None:
            # the end first: a record appended between the two asks is then read, not skipped
            end = (await consumer.end_offsets([tp]))[tp]
            found = (await consumer.offsets_for_times({tp: self._from_time_ms}))[tp]
            consumer.seek(tp, found.offset if found is not None else end)
        elif new_topic:
            consumer.seek(tp, 0)
        elif self._from_beginning:
            await consumer.seek_to_beginning(tp)
        else:
            await consumer.seek_to_end(tp)
        # the position is fixed here, before "subscribed" is reported (B16): a lazy position would
        # be resolved at the first fetch, after chunks produced meanwhile
        self.start_offset = await consumer.position(tp)

    @property
    def partition(self) -> int | None:
        """The shared chunk topic's partition read (shared layout: offsets are that partition's);
        ``None`` for a thread's own topic."""
        return self._partition if self.key is not None else None

    def cursor(self) -> dict[str, int]:
        """Highest ``seq`` delivered per run: pass it back as ``after=`` to resume without
        duplicates or gaps (together with ``from_offset=last_offset + 1``)."""
        return dict(self._delivered.seen)

    def seen_run_id(self) -> str | None:
        """The run streaming on the thread as far as this subscriber has seen (its last chunk
        was not a ``finish``); no I/O."""
        return self._delivered.streaming

    async def active_run_id(self) -> str | None:
        """The thread's active run, asked of the thread's lease in the store (Mastra's
        ``activeRunId()``): the run holding an unexpired lease, else ``None`` — and ``None`` too
        when that run's ``finish`` was already delivered by this subscription (its lease is
        released just after its finish is published: a run never goes on after its finish).

        Raises:
            RuntimeError: the subscription was not made by a ``ThreadlineClient``.
        """
        if self._on_active is None:
            raise RuntimeError("this subscription was not made by a ThreadlineClient")
        return self._delivered.active(await self._on_active())

    async def abort(self) -> bool:
        """Abort the thread's active run (it ends with ``abort`` then ``finish``); True if one
        was running. Queued messages still run afterwards."""
        if self._on_abort is None:
            raise RuntimeError("this subscription was not made by a ThreadlineClient")
        return await self._on_abort()

    async def unsubscribe(self) -> None:
        """Stop reading (the runs go on)."""
        if self._shared is not None:
            await self._shared.close()
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    @property
    def stream(self) -> AsyncIterator[ChunkBody]:
        return self._iterate()

    def accept(self, chunk: ChunkBody) -> bool:
        """Dedupe/dead-attempt filter for one chunk; True if it should be shown."""
        run_id = chunk.get("runId")
        if not isinstance(run_id, str):
            return False
        k = known(chunk)
        if k is not None and k["type"] == ChunkKind.ATTEMPT_DISCARDED:  # that attempt and every earlier one of the step are dead
            p = k.get("payload") or {}
            key = (run_id, int(p.get("step", -1)))
            self._dead[key] = max(self._dead.get(key, -1), int(p.get("attempt", -1)))
        elif isinstance(attempt := chunk.get("attempt"), int) and \
                attempt <= self._dead.get((run_id, chunk.get("step", -1)), -1):
            return False
        return self._delivered.take(chunk)

    async def _iterate(self) -> AsyncIterator[ChunkBody]:
        source = self._shared if self._shared is not None else self._consumer
        assert source is not None, "call start() first"
        async for record in source:
            if self.key is not None and record.key != self.key:
                continue  # another thread's, on the shared chunk topic (the fan-out reader never passes one)
            self.last_offset = record.offset
            try:  # a chunk too big for a record (a big tool result) was stored by reference
                record = await resolve(record, self._payloads)
            except InvalidEventError:
                log.warning("chunk payload not resolvable; passed on as its reference",
                            topic=self.topic, offset=record.offset)
            try:
                chunk = parse_chunk(record.value)
            except ChunkParseError:
                continue
            if self.accept(chunk) and not self._hidden(chunk):
                yield chunk

    def _hidden(self, chunk: ChunkBody) -> bool:
        """``hide_signals``: True hides every signal echo, a list hides those signal types."""
        return hidden_echo(chunk, self._hide)
