"""A background task that runs one coroutine function every ``interval_s`` until stopped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from threadline.logging import get_logger
from threadline.transient import is_transient

log = get_logger(__name__)


class Periodic:
    """Run ``fn()`` every ``interval_s`` seconds (first after one interval) until :meth:`stop`.

    An exception from ``fn`` (or a call that outlives ``timeout_s``) is logged as ``failure`` (a
    warning: one line for a transient fault such as a pool wait or a lost connection, with the
    traceback otherwise) and the loop goes on at the next interval: background duties (the
    outbox relay, the stuck-run sweeper) outlive a Postgres or Kafka outage.

    Args:
        name: the asyncio task's name.
        interval_s: seconds between the end of one call and the start of the next.
        fn: ``async () -> Any``.
        failure: the log message when a call raises.
        timeout_s: the longest one call may take, in seconds (``None``: unbounded); a call that
            outlives it is cancelled, logged as ``failure``, and the next one runs on time.
    """

    def __init__(self, name: str, interval_s: float, fn: Callable[[], Awaitable[object]], *, failure: str,
                 timeout_s: float | None = None) -> None:
        self._name = name
        self._interval_s = interval_s
        self._fn = fn
        self._failure = failure
        self._timeout_s = timeout_s
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the loop (a no-op while it runs)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name=self._name)

    async def stop(self) -> None:
        """Cancel the loop and wait for it to end."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                async with asyncio.timeout(self._timeout_s):
                    await self._fn()
            except Exception as exc:  # a background duty never dies of one failed pass
                if is_transient(exc):  # a pool wait, a lost connection: one line, no traceback
                    log.warning(self._failure, task=self._name, error=f"{type(exc).__name__}: {exc}")
                else:
                    log.warning(self._failure, task=self._name, exc_info=True)
