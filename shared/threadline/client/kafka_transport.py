"""The transport over Kafka: requests go to the ingress topic, replies come back on the replies
topic, a thread's chunks are read from its chunk topic, and reads go through a reader it is given.

Which reader (an explicit choice, ``reader=``):

- none given: :class:`~threadline.client.postgres_reader.PostgresReader` on ``settings.pg_dsn``
  (the read model the services write; today's behaviour);
- :meth:`GatewayReader.connect(url, api_key=…) <threadline.client.gateway_http.GatewayReader.connect>`:
  the gateway's reads over HTTP, so the client needs no PostgreSQL for reads.

Chunks (``subscribe``): by default each subscription is a Kafka consumer of its own; with
``fanout`` (the gateway's choice; ``THREADLINE_CLIENT_SHARED_READER`` for the client) every
subscription of the transport is read through one
:class:`~threadline.kafka.fanout.FanoutReader`, ``THREADLINE_FANOUT_CONSUMERS`` consumers
whatever the number of subscriptions.

PostgreSQL is still reached for one thing besides reads: a request or reply body over
``max_record_bytes`` travels by reference (docs/decisions.md#payloads-by-reference), and the
connection is opened only when one is met.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from aiokafka.errors import KafkaError

from threadline.client.replies import ReplyListener
from threadline.client.results import BrokerUnavailableError
from threadline.client.subscription import ThreadSubscription
from threadline.client.transport import Follow, Reader, ReadName, Sent
from threadline.config import Settings, get_settings
from threadline.events.base import Event
from threadline.kafka.admin import TopicAdmin
from threadline.kafka.fanout import RETRY_AFTER_S, FanoutReader, ReaderFullError
from threadline.kafka.layout import chunk_place, ensure_shared_chunks
from threadline.kafka.producer import Producer
from threadline.kafka.security import client_kwargs
from threadline.ops import tracing
from threadline.store.payloads import PayloadStore
from threadline.topics import Topics, thread_key


class StreamsFullError(BrokerUnavailableError):
    """The transport's fan-out reader serves its maximum of streams; ``retry_after_s``: when to
    ask again (a gateway answers 503 with ``Retry-After``)."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class KafkaTransport:
    """Kafka for requests, replies and chunks; ``reader`` for reads.

    Args:
        settings: bootstrap, topic prefix, security, timeouts (default: ``THREADLINE_*``).
        reader: where reads go (default: PostgreSQL on ``settings.pg_dsn``; see the module).
        fanout: read every subscription through one fan-out reader (default:
            ``settings.client_shared_reader``); ``max_streams``: its bound (``None``: none).

    Attributes:
        settings, topics: the cluster's; ``replies``: the reply listener; ``admin``: the topic
        admin; ``fanout``: the fan-out reader, or ``None`` (a consumer per subscription).
    """

    def __init__(self, settings: Settings | None = None, *, reader: Reader | None = None,
                 fanout: bool | None = None, max_streams: int | None = None) -> None:
        self.settings = settings or get_settings()
        self.topics = Topics.of(self.settings)
        self.reply_timeout_s = self.settings.reply_timeout_s
        self.agents_module: str | None = self.settings.agents_module
        if reader is None:
            from threadline.client.postgres_reader import PostgresReader

            reader = PostgresReader(self.settings.pg_dsn, statement_cache=self.settings.pg_use_statement_cache)
        self.reader = reader
        self._payloads = PayloadStore(dsn=self.settings.pg_dsn, statement_cache=self.settings.pg_use_statement_cache)
        tracing.configure("client")  # on only with OTEL_EXPORTER_OTLP_ENDPOINT / THREADLINE_TRACE_FILE, or an app's own SDK
        self._security = client_kwargs(self.settings)  # TLS / SASL (docs/operations.md)
        self._producer = Producer(self.settings.kafka_bootstrap, client_id="threadline-client", linger_ms=0,
                                  max_record_bytes=self.settings.max_record_bytes,
                                  spill=lambda body, topic: self._payloads.put(body, topic=topic),
                                  security=self._security)
        self.admin = TopicAdmin(self.settings.kafka_bootstrap, security=self._security,  # chunk topics may be deleted
                                replication_factor=self.settings.replication_factor, recheck=True)  # (decision 41)
        self.replies = ReplyListener(self.settings.kafka_bootstrap, self.topics.replies, payloads=self._payloads,
                                     security=self._security)
        shared = self.settings.client_shared_reader if fanout is None else fanout
        self.fanout = FanoutReader(self.settings.kafka_bootstrap, consumers=self.settings.fanout_consumers,
                                   queue_records=self.settings.fanout_queue_records, max_streams=max_streams,
                                   security=self._security) if shared else None

    def __repr__(self) -> str:
        return f"KafkaTransport({self.settings.kafka_bootstrap!r})"

    async def start(self) -> None:
        """Connect to the broker (producer, topic admin, reply listener).

        Raises:
            BrokerUnavailableError: the broker cannot be reached within ``reply_timeout_s``.
        """
        try:
            await asyncio.wait_for(self._connect(), self.reply_timeout_s)
        except (TimeoutError, KafkaError, OSError) as exc:
            await self._close(2.0)
            raise BrokerUnavailableError(f"cannot reach the Kafka broker at {self.settings.kafka_bootstrap}: "
                                         f"{type(exc).__name__} {exc}".rstrip()) from exc

    async def _connect(self) -> None:
        await self._producer.start()
        await self.admin.start()
        await self.admin.ensure(self.topics.internal(), partitions=self.settings.partitions)
        await ensure_shared_chunks(self.admin, self.topics, partitions=self.settings.chunk_partitions,
                                   retention_ms=self.settings.chunk_retention_ms)
        await self.replies.start()
        if self.fanout is not None:
            await self.fanout.start()

    async def stop(self) -> None:
        """Disconnect; with the broker away, every part gets a few seconds, then is left behind."""
        await self._close(3.0)

    async def _close(self, each_s: float) -> None:
        closes = [self.fanout.stop] if self.fanout is not None else []
        for close in (*closes, self.replies.stop, self.admin.stop, self._producer.stop, self._payloads.close, self.reader.close):
            with contextlib.suppress(Exception):  # TimeoutError included: the broker is away
                await asyncio.wait_for(close(), each_s)

    async def publish(self, request: Event) -> None:
        """Publish a raw request event to the ingress topic, keyed by its thread.

        Raises:
            BrokerUnavailableError: not acknowledged within ``reply_timeout_s`` (it may still be
                delivered later, and is then handled once).
        """
        key = thread_key(request.resource_id, request.thread_id)  # type: ignore[attr-defined]  # every ingress request has both
        timeout_s = self.reply_timeout_s
        try:
            with tracing.span(f"{self.topics.ingress} publish", **{  # the root of the request's trace
                    "messaging.system": "kafka", "messaging.destination.name": self.topics.ingress,
                    "threadline.request": getattr(request, "type", None), "threadline.thread_id": key}):
                await asyncio.wait_for(self._producer.publish(self.topics.ingress, request, key=key), timeout_s)
        except (TimeoutError, KafkaError) as exc:
            raise BrokerUnavailableError(
                f"request {request.event_id} not acknowledged by the Kafka broker within {timeout_s:g} s "
                f"({type(exc).__name__}); it may still be delivered later and is then handled once") from exc

    async def request(self, request: Event, expect: Mapping[str, tuple[str, ...]], *,
                      wait_s: float | None = None) -> Sent:
        """Listen for each slot's replies, then publish ``request`` (a reply cannot slip past).

        Raises:
            BrokerUnavailableError: as :meth:`publish`.
        """
        replies = {slot: self.replies.expect(request.event_id, kinds[0]) if len(kinds) == 1
                   else self.replies.expect_first(request.event_id, kinds) for slot, kinds in expect.items()}
        await self.publish(request)
        return Sent(request.event_id, replies)

    def refuse_when_full(self) -> None:
        """Raises :class:`StreamsFullError` when the fan-out reader serves its ``max_streams``
        already (nothing without a reader or a bound): a check without I/O, for callers that refuse
        before any other work (the gateway, decision 223) and for :meth:`subscribe`."""
        if self.fanout is not None and self.fanout.full:
            raise StreamsFullError(f"this process serves its maximum of {self.fanout.max_streams} streams", RETRY_AFTER_S)

    async def subscribe(self, resource_id: str, thread_id: str, follow: Follow) -> ThreadSubscription:
        """Follow the thread's chunk topic (per-thread layout: created now if it does not exist
        yet; shared layout: its partition of the shared topic, the thread's records only).

        Raises:
            StreamsFullError: the fan-out reader serves its ``max_streams`` already.
        """
        place = chunk_place(self.topics, self.settings.chunk_partitions, resource_id, thread_id)
        topic = place.topic
        self.refuse_when_full()  # refused before a topic is made
        sub = ThreadSubscription(self.settings.kafka_bootstrap, topic, from_beginning=follow.from_beginning,
                                 from_offset=follow.from_offset, from_time_ms=follow.from_time_ms,
                                 on_abort=follow.on_abort, on_active=follow.on_active,
                                 after=dict(follow.after) if follow.after is not None else None,
                                 hide_signals=follow.hide_signals, payloads=self._payloads, security=self._security,
                                 reader=self.fanout, partition=place.partition, key=place.only_key)
        # the consumer connects while the topic is made (decision 101); the shared one was made at start
        made, connected = await asyncio.gather(
            self.admin.ensure_chunk_topic(topic, retention_ms=self.settings.chunk_retention_ms) if not place.shared
            else _nothing_made(), sub.connect(), return_exceptions=True)
        try:
            for outcome in (made, connected):
                if isinstance(outcome, BaseException):
                    raise outcome
            await sub.start(new_topic=made is True)
        except ReaderFullError as exc:
            await sub.unsubscribe()
            raise StreamsFullError(str(exc), exc.retry_after_s) from exc
        except BaseException:
            await sub.unsubscribe()
            raise
        return sub

    async def read(self, name: ReadName, /, **params: object) -> Any:
        """The reader's answer (:data:`~threadline.client.transport.ReadName`)."""
        return await self.reader.read(name, **params)


async def _nothing_made() -> bool:
    """No topic is made for a subscription to the shared chunk topic (it exists since start)."""
    return False
