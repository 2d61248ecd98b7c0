"""One request for many concurrent callers: the items submitted while a batch is in flight form
the next batch, so N callers arriving together cost one round trip, not N.

Used where a burst of steps would otherwise make one broker or database request each (the
chunk topics a worker takes, :class:`threadline.kafka.admin.TopicAdmin`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)

Run = Callable[[list[T]], Awaitable[Mapping[T, BaseException]]]
"""``run(items) -> errors``: handles a batch of distinct items; the mapping holds the error of
each item that failed on its own (the others succeeded). An exception raised by ``run`` fails
every item of the batch."""


class Coalescer(Generic[T]):
    """Gathers the items concurrent callers :meth:`submit` and hands them to ``run`` together,
    one batch in flight at a time (at most ``max_batch`` distinct items each).

    A caller's item joins the batch being gathered in the current event-loop turn or, while a
    batch is in flight, the next one; equal items share one slot. A cancelled caller leaves its
    batch running for the others.
    """

    def __init__(self, run: Run[T], *, max_batch: int = 500) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self._run = run
        self._max_batch = max_batch
        self._queue: list[tuple[T, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    async def submit(self, item: T) -> None:
        """Wait until the batch holding ``item`` was handled.

        Raises:
            BaseException: whatever ``run`` raised for the batch, or reported for ``item``.
        """
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="coalescer")
        await future

    async def _drain(self) -> None:
        await asyncio.sleep(0)  # the callers of this loop turn join the first batch
        while self._queue:
            batch, items = self._take()
            try:
                errors = await self._run(items)
            except asyncio.CancelledError:
                for _, future in batch:
                    future.cancel()
                raise
            except Exception as exc:  # noqa: BLE001 - handed to every caller of the batch
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for item, future in batch:
                if not future.done():
                    if (error := errors.get(item)) is not None:
                        future.set_exception(error)
                    else:
                        future.set_result(None)

    def _take(self) -> tuple[list[tuple[T, asyncio.Future[None]]], list[T]]:
        """The next batch: queued entries up to ``max_batch`` distinct items, in arrival order."""
        items: dict[T, None] = {}
        cut = len(self._queue)
        for i, (item, _) in enumerate(self._queue):
            if item not in items and len(items) == self._max_batch:
                cut = i
                break
            items[item] = None
        batch, self._queue = self._queue[:cut], self._queue[cut:]
        return batch, list(items)
