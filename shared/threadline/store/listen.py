"""A dedicated, self-healing LISTEN connection (case C26).

The connection is never taken from the pool: a pooled connection can be handed to someone else
(or, behind a transaction-pooling PgBouncer, to another server connection) and its LISTEN
silently lost. It is opened with ``asyncpg.connect`` on the *direct* DSN
(``Settings.pg_session_dsn``), named ``threadline-listen-<channel>`` in ``pg_stat_activity``.

Loss is detected two ways: asyncpg's termination callback (the server closed the socket:
``pg_terminate_backend``, a restart) wakes the watcher at once, and a ``SELECT 1`` every
``health_s`` catches a connection that died silently. After a loss the watcher reconnects
(retrying every ``health_s`` while Postgres is down), LISTENs again and calls ``catch_up()`` for
work notified while nobody listened.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import asyncpg

from threadline.logging import get_logger

log = get_logger(__name__)


class Listener:
    """LISTEN on ``channel``; call ``on_notify(payload)`` per notification.

    Args:
        dsn: a direct (session) connection string, not a transaction pooler.
        channel: the NOTIFY channel.
        on_notify: called in the event loop with each payload (must not block).
        catch_up: awaited after every reconnect (not after the first connect).
        health_s: seconds between health checks, and between reconnect attempts.
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
        self._lost = asyncio.Event()
        self.reconnects = 0
        """How many times the connection was restored (for tests and logs)."""

    @property
    def backend_pid(self) -> int | None:
        """The server process id of the LISTEN connection (``pg_terminate_backend`` target)."""
        return self._conn.get_server_pid() if self._conn is not None and not self._conn.is_closed() else None

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
        conn = await asyncpg.connect(self._dsn, timeout=max(self._health_s, 5.0),
                                     server_settings={"application_name": f"threadline-listen-{self._channel}"})
        try:
            await conn.add_listener(self._channel, lambda _c, _pid, _ch, payload: self._on_notify(payload))
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(lambda _c: self._lost.set())
        self._lost.clear()
        self._conn = conn
        log.info("listening", channel=self._channel, backend_pid=conn.get_server_pid())

    async def _healthy(self) -> bool:
        conn = self._conn
        if conn is None or conn.is_closed():
            return False
        try:
            await conn.fetchval("SELECT 1", timeout=self._health_s)
            return True
        except Exception:  # noqa: BLE001 - any failure means the connection is unusable
            return False

    async def _watch(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), self._health_s)
            if await self._healthy():
                continue
            log.warning("LISTEN connection lost; reconnecting", channel=self._channel)
            while True:
                try:
                    if self._conn is not None:
                        self._conn.terminate()
                    await self._connect()
                    self.reconnects += 1
                    if self._catch_up is not None:
                        await self._catch_up()
                    log.info("LISTEN connection restored", channel=self._channel, reconnects=self.reconnects)
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - Postgres may still be down: try again
                    log.warning("LISTEN reconnect failed", channel=self._channel,
                                error=f"{type(exc).__name__}: {exc}"[:200])
                    await asyncio.sleep(self._health_s)


async def notify(conn: asyncpg.Connection, channel: str, payload: str) -> None:
    """``NOTIFY`` ``channel`` with ``payload``, delivered to the listeners when the caller's
    transaction commits (none when it rolls back)."""
    await conn.execute("SELECT pg_notify($1, $2)", channel, payload)
