"""Publishing the transactional outbox (:mod:`threadline.store.outbox` holds the rows): after
commit a handler calls :meth:`Outbox.flush` with the ids ``add`` returned (low latency), and
:class:`OutboxRelay` publishes whatever a crash left behind. A record may be published twice
(crash between publish and mark); consumers drop duplicate event ids.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from threadline._internal.periodic import Periodic
from threadline.errors import ThreadlineError
from threadline.kafka.producer import Producer
from threadline.logging import get_logger
from threadline.store.db import Database
from threadline.store.outbox import OutboxRow, Queued, lock_leftovers, mark_published, unpublished

log = get_logger(__name__)


class OutboxNotAcknowledgedError(ThreadlineError, TimeoutError):
    """Some outbox rows were not acknowledged by Kafka in time (or were refused); they stay
    unpublished and the relay publishes them later. A ``TimeoutError``, so callers treat it as
    transient. ``failed``: outbox id -> what happened to it."""

    def __init__(self, failed: dict[int, BaseException]) -> None:
        first = next(iter(failed.values()))
        super().__init__(f"{len(failed)} outbox row(s) not published: {first!r}")
        self.failed = failed

    @staticmethod
    def behind(key: str) -> RuntimeError:
        """Why a row was not sent: an earlier row of its key was not published."""
        return RuntimeError(f"an earlier outbox row of key {key!r} was not published")


_T = TypeVar("_T")


def _retrieve(fut: asyncio.Future[_T]) -> None:
    """Done-callback: an acknowledgement nobody waits for any more must not log 'never retrieved'."""
    if not fut.cancelled():
        fut.exception()


def key_rounds(rows: list[OutboxRow]) -> list[list[OutboxRow]]:
    """Split ``rows`` (in id order) into rounds to publish one after the other, so that each
    key's rows reach Kafka in id order across topics: a key's row goes in the same round as the
    key's previous row when both are for one topic (one partition keeps their order), else in
    the next round. Rows without a key go in the first round. Pure; keeps id order in a round.

    Example: key ``k``: finish (chunk topic), result (step-results) → ``[[finish], [result]]``.
    """
    level: dict[str, tuple[int, str]] = {}
    rounds: list[list[OutboxRow]] = []
    for r in rows:
        n = 0
        if r.key is not None:
            prev = level.get(r.key)
            if prev is not None:
                n = prev[0] if prev[1] == r.topic else prev[0] + 1
            level[r.key] = (n, r.topic)
        while len(rounds) <= n:
            rounds.append([])
        rounds[n].append(r)
    return rounds


class Outbox:
    """Publishes outbox rows and marks them published.

    Args:
        db: the service's pool.
        producer: the service's producer.
        ack_timeout_s: the longest one publish waits for Kafka (topic metadata and every
            acknowledgement), in seconds; what is not acknowledged by then stays for the relay.
        before_relay: awaited with the ``(topic, key)`` of the rows a relay pass is about to
            publish (the service takes their chunk topics, re-created if the idle-topic sweep
            deleted them). Rows of a chunk topic being deleted wait for a later pass.
    """

    def __init__(self, db: Database, producer: Producer, *, ack_timeout_s: float = 30.0,
                 before_relay: Callable[[list[tuple[str, str | None]]], Awaitable[None]] | None = None) -> None:
        self._db = db
        self._before_relay = before_relay
        self._producer = producer
        self.ack_timeout_s = ack_timeout_s
        self._unmarked: list[int] = []
        self._marker: asyncio.Task[None] | None = None

    async def publish_stored(self, box_id: int, topic: str, key: str | None, value: bytes,
                             headers: list[tuple[str, bytes]]) -> None:
        """Publish a row just committed by the caller from what it holds in memory (no read
        back), as :meth:`flush` does.

        Raises:
            OutboxNotAcknowledgedError: as :meth:`flush`.
        """
        await self.flush([Queued(box_id, OutboxRow(box_id, topic, key, headers, value))])

    async def flush(self, ids: list[int]) -> None:
        """Publish the given rows (in id order) after their transaction committed and wait for
        the acks. Ids returned by :func:`add` (:class:`Queued`) are published from memory; plain
        ids are read back (and skipped when already published). When all were acknowledged they
        are marked published off the caller's path, all rows acknowledged meanwhile in one
        ``UPDATE`` (a lost mark means the relay publishes the row again and consumers drop the
        duplicate); when some were not, the others are marked before the error is raised.

        Raises:
            OutboxNotAcknowledgedError: some rows were not acknowledged within ``ack_timeout_s``
                (or were refused); those stay for the relay, the others are marked.
        """
        if not ids:
            return
        rows = [i.row for i in ids if isinstance(i, Queued)]
        unknown = [int(i) for i in ids if not isinstance(i, Queued)]
        if unknown:
            rows += await unpublished(self._db, unknown)
        if rows:  # no pooled connection is held while Kafka acknowledges
            rows.sort(key=lambda r: r.id)
            acked, failed = await self._send(rows)
            if failed:  # the rare path: mark what was taken now, then hand the rest to the caller's retry
                if acked:
                    await mark_published(self._db, acked)
                raise OutboxNotAcknowledgedError(failed)
            self._mark_soon(acked)

    def _mark_soon(self, ids: list[int]) -> None:
        """Mark acknowledged rows published off the caller's path (one ``UPDATE`` for all the
        rows acknowledged meanwhile); the caller's record is finished once Kafka acknowledged."""
        self._unmarked.extend(ids)
        if self._marker is None or self._marker.done():
            self._marker = asyncio.create_task(self._mark_unmarked(), name="outbox-marks")

    async def _mark_unmarked(self) -> None:
        while self._unmarked:
            ids, self._unmarked = self._unmarked, []
            try:
                await mark_published(self._db, ids)
            except Exception:  # the relay publishes them again; duplicates are dropped
                log.warning("outbox marks failed; the relay republishes", count=len(ids), exc_info=True)

    async def _send(self, rows: list[OutboxRow], *, key_order: bool = False) -> tuple[list[int], dict[int, BaseException]]:
        """Send ``rows`` in order and wait, at most ``ack_timeout_s`` in all, for their
        acknowledgements. Returns the ids that may be marked published and the failed ones.

        One row cannot hold up the others: a topic whose metadata does not come (a missing
        topic, a broker away) fails that topic's rows only, and a row that is refused or not
        acknowledged in time fails alone. A key with a failed row keeps all its rows of this
        batch unmarked, so the relay publishes them again in their order.

        ``key_order`` (the relay's passes): a key also keeps its order across topics — a row is
        sent only once every earlier row of its key on another topic was acknowledged (a run's
        ``finish`` chunk before its step result, decision 65), so the rows go out in rounds
        (:func:`key_rounds`), and a key with a failed row sends none of its later rows. Without
        it (a handler's own flush, on its path) every row goes out at once, as each topic's
        order is all its callers need.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ack_timeout_s
        failed: dict[int, BaseException] = {}
        for batch in key_rounds(rows) if key_order else [rows]:
            bad = {r.key for r in rows if r.id in failed and r.key is not None}
            for r in batch:
                if r.key is not None and r.key in bad:
                    failed[r.id] = OutboxNotAcknowledgedError.behind(r.key)
            await self._send_round([r for r in batch if r.key is None or r.key not in bad], deadline, failed)
        bad_keys = {r.key for r in rows if r.id in failed}
        return [r.id for r in rows if r.id not in failed and r.key not in bad_keys], failed

    async def _send_round(self, rows: list[OutboxRow], deadline: float, failed: dict[int, BaseException]) -> None:
        """Send ``rows`` (no two rows of one key on different topics) and wait until
        ``deadline`` (event-loop time) for their acknowledgements; adds what failed to ``failed``."""
        if not rows:
            return
        loop = asyncio.get_running_loop()
        queued: list[tuple[OutboxRow, asyncio.Future[Any]]] = []
        by_topic: dict[str, list[OutboxRow]] = {}
        for r in rows:
            by_topic.setdefault(r.topic, []).append(r)

        async def queue(topic_rows: list[OutboxRow]) -> None:
            """One topic's rows, in order (so each key keeps its order); the first refusal
            (e.g. metadata that never comes) fails the rest of this topic's rows."""
            for i, r in enumerate(topic_rows):
                try:
                    fut = await self._producer.send_raw(r.topic, r.value, key=r.key, headers=r.headers)
                except Exception as exc:  # noqa: BLE001 - a refused row fails its topic, not the batch
                    failed.update((rest.id, exc) for rest in topic_rows[i:])
                    return
                fut.add_done_callback(_retrieve)
                queued.append((r, fut))

        if len(by_topic) == 1:  # the common case (a step result, a handler's events): no task
            with contextlib.suppress(TimeoutError):  # what was not queued in time fails below
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    await queue(rows)
        else:
            tasks = [asyncio.create_task(queue(topic_rows)) for topic_rows in by_topic.values()]
            _, late = await asyncio.wait(tasks, timeout=max(0.0, deadline - loop.time()))
            for task in late:  # its topic's metadata did not come in time
                task.cancel()
            if late:
                await asyncio.wait(late)
        if queued:
            await asyncio.wait([f for _, f in queued], timeout=max(0.0, deadline - loop.time()))
        _not_acknowledged(rows, queued, failed, self.ack_timeout_s)

    async def relay_once(self, *, older_than_s: float = 2.0, limit: int = 500) -> int:
        """Publish rows left unpublished for ``older_than_s``; return how many. Rows that Kafka
        does not take (see :meth:`_send`) stay for the next pass and are logged; the others are
        marked. A key's rows are sent in id order across topics too (``key_order``, decision 65)."""
        failed: dict[int, BaseException] = {}
        async with self._db.transaction() as conn:
            rows = await lock_leftovers(conn, older_than_s=older_than_s, limit=limit)
            acked: list[int] = []
            if rows and self._before_relay is not None:
                await self._before_relay([(r.topic, r.key) for r in rows])
            if rows:
                acked, failed = await self._send(rows, key_order=True)
                if acked:
                    await mark_published(conn, acked)
        if acked:
            log.info("outbox relay published leftovers", count=len(acked))
        if failed:
            topics = sorted({r.topic for r in rows if r.id in failed})
            log.warning("outbox rows not published; tried again at the next pass", count=len(failed),
                        topics=topics[:10], error=repr(next(iter(failed.values()))))
        return len(acked)


class OutboxRelay(Periodic):
    """Background task: every ``interval_s``, publish what a crash left in the outbox. A pass
    that outlives ``timeout_s`` is cancelled (its row locks released) and the next one runs."""

    def __init__(self, outbox: Outbox, *, interval_s: float = 1.0) -> None:
        super().__init__("outbox-relay", interval_s, outbox.relay_once, failure="outbox relay failed",
                         timeout_s=outbox.ack_timeout_s + 30.0)


def _not_acknowledged(rows: list[OutboxRow], queued: list[tuple[OutboxRow, asyncio.Future[Any]]],
                      failed: dict[int, BaseException], ack_timeout_s: float) -> None:
    """Add to ``failed`` each row of ``rows`` Kafka did not acknowledge once the wait is over:
    its send still pending (a timeout), cancelled or refused, or never queued (its topic's
    metadata did not come in time)."""
    for r, fut in queued:
        if not fut.done():
            failed[r.id] = TimeoutError(f"not acknowledged by Kafka within {ack_timeout_s} s")
        elif fut.cancelled():
            failed[r.id] = asyncio.CancelledError()
        elif (refused := fut.exception()) is not None:
            failed[r.id] = refused
    sent = {r.id for r, _ in queued}
    for r in rows:
        if r.id not in sent and r.id not in failed:
            failed[r.id] = TimeoutError(f"topic {r.topic!r} not available within {ack_timeout_s} s")
