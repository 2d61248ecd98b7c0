"""Publishing a run's chunks to its thread's chunk topic with run id, step, attempt and seq.

Per chunk: one dict update, one orjson encode, one non-blocking send to the thread's partition
(0 of its own topic, or the shared topic's partition of its key: :mod:`threadline.kafka.layout`;
named, so the producer skips its partitioner; it batches); :meth:`ChunkWriter.flush` waits for every
acknowledgement before the step result is published, so the next step's chunks always follow
this step's on the topic. Delivery futures already resolved are dropped as the step goes (their
first failure kept for ``flush``), so a long stream holds only the records still in flight, and
``flush`` awaits them one by one instead of through ``asyncio.gather`` (which schedules a
callback per future: a quarter of the worker's CPU at 20,000 chunks).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, cast

import orjson

from threadline._internal import step_clock
from threadline.events.chunk_types import Emitted
from threadline.events.chunks import chunk_headers, envelope, nested_chunk
from threadline.kafka.producer import Producer

_PRUNE_EVERY = 1024


class ChunkWriter:
    """The Kafka :class:`~threadline.runtime.step.ports.ChunkSink`: assigns ``seq`` (strictly
    increasing within the run) and publishes."""

    __slots__ = ("_failure", "_futures", "_headers", "_producer", "_prune_at", "_text_unmarked", "_topic",
                 "ack_timeout_s", "attempt", "finished", "first_sent", "flush_started", "flushed_at", "held",
                 "hold_finish", "key", "mirror", "partition", "run_id", "seq", "step")

    def __init__(self, producer: Producer, topic: str, *, run_id: str, step: int, attempt: int,
                 seq: int, key: str, partition: int = 0, ack_timeout_s: float = 30.0,
                 hold_finish: bool = False) -> None:
        self._producer = producer
        self._topic = topic
        self.partition = partition
        """The partition of ``topic`` the thread's chunks go to (:func:`~threadline.kafka.layout.chunk_place`)."""
        self.run_id = run_id
        self.step = step
        self.attempt = attempt
        self.seq = seq
        self.key = key.encode()
        self._futures: list[asyncio.Future[Any]] = []
        self._failure: BaseException | None = None
        self._prune_at = _PRUNE_EVERY
        self.finished = False  # a ``finish`` chunk was published
        self.hold_finish = hold_finish
        """Hold a ``finish`` chunk back instead of publishing it (decision 19): the step store
        queues it in the outbox with the step's result, so it is published only once the step
        is durable."""
        self.held: dict[str, Any] | None = None
        """The stamped ``finish`` chunk held back, if any."""
        self.ack_timeout_s = ack_timeout_s
        """The longest :meth:`flush` waits for Kafka's acknowledgements, in seconds."""
        self._headers = chunk_headers()  # each chunk carries the trace (when tracing is on)
        self.first_sent: float | None = None
        """``time.perf_counter()`` when the first chunk was emitted (the step overhead's end)."""
        self.flush_started: float | None = None
        """``time.perf_counter()`` when the last :meth:`flush` began."""
        self.flushed_at: float | None = None
        """``time.perf_counter()`` when the last :meth:`flush` returned."""
        self.mirror: tuple[str, int, bytes, Mapping[str, Any]] | None = None
        """A child run's parent ``(topic, partition, key, target)``: each chunk is also published there as a
        nested ``tool-output`` chunk (decision 78; a held ``finish`` by the step store)."""
        self._text_unmarked = True
        """No ``text-delta`` emitted yet: the first one marks the step clock's ``first_text`` (the
        step's task, decision 84; a later one would not change it), so the others skip the clock."""

    async def emit(self, body: Emitted) -> dict[str, Any]:
        """Stamp and publish ``body``; returns it (with the stamp)."""
        chunk = cast(dict[str, Any], body)  # a TypedDict is a plain dict at run time: stamped in place
        if self.first_sent is None:
            self.first_sent = time.perf_counter()
        kind = chunk.get("type")
        if kind == "text-delta" and self._text_unmarked:
            self._text_unmarked = False
            step_clock.mark("first_text")
        envelope(chunk, run_id=self.run_id, step=self.step, attempt=self.attempt, seq=self.seq)
        self.seq += 1
        if kind == "finish":
            if self.hold_finish:
                self.held = chunk
                return chunk
            self.finished = True
        fut = await self._producer.send_raw(self._topic, orjson.dumps(chunk), key=self.key,
                                            headers=self._headers, partition=self.partition)
        self._futures.append(fut)
        if self.mirror is not None:
            topic, partition, key, target = self.mirror
            self._futures.append(await self._producer.send_raw(topic, orjson.dumps(nested_chunk(chunk, target)),
                                                               key=key, headers=self._headers, partition=partition))
        if len(self._futures) >= self._prune_at:
            self._prune()
        return chunk

    def drop_held(self) -> None:
        """Forget a held ``finish`` that was never stored (its step could not be saved): its
        ``seq`` is given to the next chunk, so the stream has no gap; later finishes are sent."""
        if self.held is not None:
            self.seq = self.held["seq"]
            self.held = None
        self.hold_finish = False

    def finish_stored(self) -> None:
        """The held ``finish`` was stored with the step's result (the outbox publishes it): the
        stream counts as finished."""
        self.held = None
        self.finished = True

    def _prune(self) -> None:
        pending = []
        for fut in self._futures:
            if not fut.done():
                pending.append(fut)
            elif self._failure is None and (fut.cancelled() or fut.exception() is not None):
                self._failure = asyncio.CancelledError() if fut.cancelled() else fut.exception()
        self._futures = pending
        self._prune_at = max(_PRUNE_EVERY, 2 * len(pending))  # a slow broker never makes this quadratic

    async def flush(self) -> None:
        """Wait until every emitted chunk is acknowledged.

        Raises:
            Exception: the first delivery failure (aiokafka's ``KafkaError``) of any chunk
                emitted since the last flush.
            TimeoutError: not every chunk was acknowledged within ``ack_timeout_s`` (a broker
                away, or a stalled client): the step is not hung by it, it fails as a transient
                fault and is executed again under the next attempt.
        """
        self.flush_started = time.perf_counter()
        futures, self._futures = self._futures, []
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
        try:
            async with asyncio.timeout(self.ack_timeout_s):
                for fut in futures:  # in send order; each await of a resolved future is cheap
                    await fut
        except TimeoutError:
            raise TimeoutError(f"chunks of run {self.run_id} not acknowledged by Kafka within "
                               f"{self.ack_timeout_s} s") from None
        self.flushed_at = time.perf_counter()
