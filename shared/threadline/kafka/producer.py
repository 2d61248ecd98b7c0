"""The process-wide Kafka producer (aiokafka), idempotent, batching with ``linger_ms``.

A record body over ``max_record_bytes`` is handed to ``spill`` (the payload store,
:mod:`threadline.kafka.payloads`) and replaced by a reference; without a
``spill`` such a record is refused with :class:`RecordTooLargeError`, never dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer

from threadline.errors import NotConnectedError, ThreadlineError
from threadline.events.base import Event
from threadline.events.codec import Headers, encode
from threadline.kafka.payloads import reference, with_ref_header


class RecordTooLargeError(ThreadlineError, ValueError):
    """A record body is over ``max_record_bytes`` and there is no payload store to spill it to."""


Spill = Callable[[bytes, str], Awaitable[str]]
"""``spill(body, topic) -> payload id``: stores a body that is too big for a record."""


class Producer:
    """Publishes events and raw records. Use as an async context manager or ``start``/``stop``.

    ``send`` returns once the record is queued (delivery future); ``publish`` waits for the
    broker's acknowledgement. Records of one key keep their order (idempotent producer).
    """

    def __init__(self, bootstrap: str, *, linger_ms: int = 2, client_id: str = "threadline",
                 max_record_bytes: int = 512 * 1024, spill: Spill | None = None,
                 security: Mapping[str, object] | None = None) -> None:
        self._bootstrap = bootstrap
        self._security = dict(security or {})
        self._max_record_bytes = max_record_bytes
        self.spill = spill
        """Where bodies over ``max_record_bytes`` go (set by the owner once its store is up)."""
        self._linger_ms = linger_ms
        self._client_id = client_id
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        """Connect (idempotent)."""
        if self._producer is not None:
            return
        producer = AIOKafkaProducer(
            bootstrap_servers=self._bootstrap, client_id=self._client_id, acks="all",
            enable_idempotence=True, linger_ms=self._linger_ms, max_batch_size=256 * 1024,
            max_request_size=4 * 1024 * 1024, **self._security,
        )
        try:
            await producer.start()
        except BaseException:
            with contextlib.suppress(Exception):  # a failed start (broker away) leaves nothing running
                await producer.stop()
            raise
        self._producer = producer

    async def stop(self) -> None:
        """Flush and disconnect (idempotent)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def _p(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise NotConnectedError("producer not started")
        return self._producer

    def learn_topics(self, topics: list[str]) -> None:
        """Start fetching the metadata of ``topics`` now, all in one metadata request, so that
        the first record sent to each does not wait for it (aiokafka otherwise asks per topic at
        its first send, retrying every 100 ms while another request is in flight). Returns at
        once; a failed fetch is left to the send, which asks again."""
        producer = self._producer
        if producer is None:
            return
        for topic in topics:
            producer.client.add_topic(topic).add_done_callback(_consume)

    async def send_raw(self, topic: str, value: bytes, *, key: str | bytes | None = None,
                       headers: Headers | None = None, partition: int | None = None) -> asyncio.Future[Any]:
        """Queue one record; returns its delivery future. A body over ``max_record_bytes`` is
        spilled to the payload store and the record carries a reference instead. ``partition``
        skips the partitioner (a pure-Python murmur2 of the key per record), e.g. for the
        one-partition chunk topics.

        Raises:
            RecordTooLargeError: the body is too big and no ``spill`` is set.
        """
        k = key.encode() if isinstance(key, str) else key
        if len(value) > self._max_record_bytes:
            if self.spill is None:
                raise RecordTooLargeError(f"record for {topic} has {len(value)} bytes (limit {self._max_record_bytes}) "
                                          "and no payload store is configured")
            pid = await self.spill(value, topic)
            value, headers = reference(pid, len(value)), with_ref_header(headers, pid)
        fut: asyncio.Future[Any] = await self._p.send(topic, value, key=k, headers=headers, partition=partition)
        return fut

    async def send(self, topic: str, event: Event, *, key: str | None) -> asyncio.Future[Any]:
        """Queue ``event``; returns its delivery future."""
        value, headers = encode(event)
        return await self.send_raw(topic, value, key=key, headers=headers)

    async def publish(self, topic: str, event: Event, *, key: str | None) -> Any:
        """Send ``event`` and wait for the broker's acknowledgement."""
        return await (await self.send(topic, event, key=key))

    async def publish_raw(self, topic: str, value: bytes, *, key: str | bytes | None = None,
                          headers: Headers | None = None) -> Any:
        """Send a raw record and wait for the acknowledgement."""
        return await (await self.send_raw(topic, value, key=key, headers=headers))

    async def flush(self) -> None:
        """Wait until every queued record is acknowledged."""
        await self._p.flush()


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieve a background metadata fetch's outcome (a failure is retried by the send)."""
    if not future.cancelled():
        future.exception()
