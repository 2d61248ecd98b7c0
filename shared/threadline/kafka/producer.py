"""The process-wide Kafka producer (aiokafka), idempotent, batching with ``linger_ms``."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaProducer

from threadline.errors import NotConnectedError
from threadline.events.base import Event
from threadline.events.codec import Headers, encode


class Producer:
    """Publishes events and raw records. Use as an async context manager or ``start``/``stop``.

    ``send`` returns once the record is queued (delivery future); ``publish`` waits for the
    broker's acknowledgement. Records of one key keep their order (idempotent producer).
    """

    def __init__(self, bootstrap: str, *, linger_ms: int = 2, client_id: str = "threadline") -> None:
        self._bootstrap = bootstrap
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
            max_request_size=4 * 1024 * 1024,
        )
        await producer.start()
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

    async def send_raw(self, topic: str, value: bytes, *, key: str | bytes | None = None,
                       headers: Headers | None = None, partition: int | None = None) -> asyncio.Future[Any]:
        """Queue one record; returns its delivery future. ``partition`` skips the partitioner
        (a pure-Python murmur2 of the key per record), e.g. for the one-partition chunk topics."""
        k = key.encode() if isinstance(key, str) else key
        return await self._p.send(topic, value, key=k, headers=headers, partition=partition)

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
