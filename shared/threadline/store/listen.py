"""A dedicated, self-healing LISTEN connection (never taken from the pool: a pooled connection
can be handed to someone else and its LISTEN silently lost, C26)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import asyncpg

from threadline.logging import get_logger

log = get_logger(__name__)


class Listener:
    """LISTEN on ``channel``; call ``on_notify(payload)`` per notification.

    Every ``health_s`` the connection is checked; after a loss it reconnects, LISTENs again and
    calls ``catch_up()`` so work that was notified while it was away is not missed.
    """

    def __init__(self, dsn: str, channel: str, on_notify: Callable[[str], None],
                 catch_up: Callable[[], Awaitable[None]] | None = None, *, health_s: float = 2.0) -> None:
        self._dsn = dsn
        self._channel = channel
        self._on_notify = on_notify
        self._catch_up = catch_up
        self._health_s = health_s
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._connect()
        self._task = asyncio.create_task(self._watch(), name=f"listen-{self._channel}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._conn is not None and not self._conn.is_closed():
            await self._conn.close()

    async def _connect(self) -> None:
        conn = await asyncpg.connect(self._dsn)
        await conn.add_listener(self._channel, lambda _c, _pid, _ch, payload: self._on_notify(payload))
        self._conn = conn

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._health_s)
            try:
                assert self._conn is not None
                await self._conn.fetchval("SELECT 1", timeout=self._health_s)
                continue
            except Exception:  # noqa: BLE001 - the connection is gone: heal below
                log.warning("LISTEN connection lost; reconnecting", channel=self._channel)
            try:
                if self._conn is not None:
                    self._conn.terminate()
                await self._connect()
                if self._catch_up is not None:
                    await self._catch_up()
                log.info("LISTEN connection restored", channel=self._channel)
            except Exception:  # noqa: BLE001 - try again next round
                log.warning("LISTEN reconnect failed", channel=self._channel, exc_info=True)
