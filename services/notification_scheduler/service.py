"""notification-scheduler: owns the notification inbox. Delivers due records (``deliver_at`` /
``summary_at`` reached) on a timer, and at once for a thread the lifecycle topic says went idle
(held high notifications are delivered in full then). Several instances share the work: records
are claimed with ``FOR UPDATE SKIP LOCKED``."""

from __future__ import annotations

import asyncio
import contextlib

from pydantic import TypeAdapter
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from threadline.events import LifecycleEvent
from threadline.events.codec import decode
from threadline.kafka.consumer import Record
from threadline.kafka.handling import is_transient
from threadline.logging import get_logger
from threadline.service import Service
from threadline.store.inbox import dispatch_due
from threadline.store.listen import Listener

INBOX_DUE_CHANNEL = "threadline_inbox_due"
"""NOTIFY channel of records that became due now (trigger of migration 0008)."""

log = get_logger(__name__)
_ADAPTER: TypeAdapter[LifecycleEvent] = TypeAdapter(LifecycleEvent)


class NotificationScheduler(Service):
    name = "notification_scheduler"

    def topics_in(self) -> list[str]:
        return [self.topics.lifecycle]

    async def setup(self) -> None:
        self._due = asyncio.Event()
        # due-work channel on a dedicated, self-healing connection (C26); after a loss it catches up
        self.due_listener = Listener(self.settings.pg_session_dsn, INBOX_DUE_CHANNEL, lambda _p: self._due.set(),
                                     self._catch_up, health_s=self.settings.pg_listen_health_s)
        await self.due_listener.start()
        self._ticker = asyncio.create_task(self._tick_loop(), name="inbox-ticks")

    async def stop(self) -> None:
        self._ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._ticker
        await self.due_listener.stop()
        await super().stop()

    async def _catch_up(self) -> None:
        self._due.set()

    async def handle(self, record: Record) -> None:
        event = decode(record.value, _ADAPTER)
        if event.type == "thread_idle":  # what waited for the thread to be idle goes now
            await self.dispatch(thread_id=event.thread_id)

    async def dispatch(self, thread_id: str | None = None) -> None:
        async with self.db.connection() as conn:
            ids, threads = await dispatch_due(conn, topics=self.topics, lease_ttl_s=self.settings.lease_ttl_s,
                                              thread_id=thread_id)
        for resource_id, tid in threads:
            await self.admin.ensure_one(self.topics.chunks(resource_id, tid),
                                        config={"retention.ms": str(self.settings.chunk_retention_ms)})
        await self.outbox.flush(ids)
        if ids:
            log.info("inbox delivered", events=len(ids), threads=len(threads))

    async def _tick_loop(self) -> None:
        while True:  # a NOTIFY (or a catch-up) wakes it early
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._due.wait(), self.settings.scheduler_interval_s)
            self._due.clear()
            try:  # a lost connection (Postgres restarting) is retried with backoff
                async for attempt in AsyncRetrying(retry=retry_if_exception(is_transient), reraise=True,
                                                   stop=stop_after_delay(30), wait=wait_exponential(0.2, max=3)):
                    with attempt:
                        await self.dispatch()
            except Exception:  # noqa: BLE001 - the next tick tries again
                log.exception("inbox tick failed")
