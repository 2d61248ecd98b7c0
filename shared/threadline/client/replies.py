"""Listening for replies: one consumer on the replies topic (no group, every partition, from
the end when the client starts) that resolves the future of each request id."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition

from threadline.client.subscription import IDLE_FETCH_WAIT_MS
from threadline.events.codec import decode
from threadline.events.replies import REPLY_ADAPTER, Reply
from threadline.kafka.payloads import PayloadRefs, resolve
from threadline.logging import get_logger

log = get_logger(__name__)


class ReplyListener:
    """Futures per ``(request_id, reply type)``; replies that arrive first are kept for a while."""

    def __init__(self, bootstrap: str, topic: str, *, payloads: PayloadRefs | None = None,
                 security: Mapping[str, object] | None = None) -> None:
        self._payloads = payloads
        self._security = dict(security or {})
        self._bootstrap = bootstrap
        self._topic = topic
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._waiting: dict[tuple[str, str], list[asyncio.Future[Reply]]] = {}
        """Every waiter of a key: one request id may be awaited twice at once (an HTTP write retried
        under its ``Idempotency-Key`` while the first is still waiting, decision 213)."""
        self._early: dict[tuple[str, str], Reply] = {}

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, enable_auto_commit=False,
                                    group_id=None, fetch_max_wait_ms=IDLE_FETCH_WAIT_MS, **self._security)
        await consumer.start()
        partitions = None
        for _ in range(100):
            partitions = consumer.partitions_for_topic(self._topic)
            if partitions:
                break
            await consumer._client.force_metadata_update()  # topic may be brand new
            await asyncio.sleep(0.05)
        tps = [TopicPartition(self._topic, p) for p in sorted(partitions or [0])]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:
            await consumer.position(tp)  # resolve now, so no reply slips in before we listen
        self._consumer = consumer
        self._task = asyncio.create_task(self._loop(), name="reply-listener")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    def expect(self, request_id: str, kind: str) -> asyncio.Future[Reply]:
        """A future resolved by the reply of type ``kind`` (``accepted``, ``error`` counts too)."""
        key = (request_id, kind)
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        if key in self._early:
            fut.set_result(self._early.pop(key))
        elif (request_id, "error") in self._early:
            fut.set_result(self._early[(request_id, "error")])
        else:
            self._waiting.setdefault(key, []).append(fut)
        return fut

    def expect_first(self, request_id: str, kinds: tuple[str, ...]) -> asyncio.Future[Reply]:
        """A future resolved by the first reply of any of ``kinds`` (or an ``error``)."""
        futures = [self.expect(request_id, k) for k in kinds]
        out: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()

        def done(f: asyncio.Future[Reply]) -> None:
            if not out.done() and not f.cancelled():
                out.set_result(f.result())
                for kind, other in zip(kinds, futures, strict=True):
                    if other is not f:
                        self._forget((request_id, kind), other)

        for f in futures:
            f.add_done_callback(done)
        return out

    def _forget(self, key: tuple[str, str], fut: asyncio.Future[Reply]) -> None:
        waiting = self._waiting.get(key, [])
        if fut in waiting:
            waiting.remove(fut)
        if not waiting:
            self._waiting.pop(key, None)

    async def _loop(self) -> None:
        assert self._consumer is not None
        async for record in self._consumer:
            try:  # a big reply (a generate result) may come by reference
                reply = decode((await resolve(record, self._payloads)).value, REPLY_ADAPTER)
            except Exception:  # noqa: BLE001 - not ours to judge; ingress dead-letters bad input
                continue
            keys: list[tuple[str, str]] = [(reply.request_id, reply.type)]
            if reply.type == "error":  # an error answers whatever was awaited
                keys = [k for k in self._waiting if k[0] == reply.request_id] or keys
            for key in keys:
                waiters = [f for f in self._waiting.pop(key, []) if not f.done()]
                for fut in waiters:
                    fut.set_result(reply)
                if not waiters:
                    self._early[key] = reply
                    if len(self._early) > 10000:
                        self._early.pop(next(iter(self._early)))
