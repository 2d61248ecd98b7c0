"""Transactional outbox: events written in the same transaction as the effect they announce.

``add`` inserts within the caller's transaction; after commit the caller calls
:meth:`Outbox.flush` with the returned ids (low latency), and :class:`OutboxRelay` publishes
whatever a crash left behind. A record may be published twice (crash between publish and
mark); consumers drop duplicate event ids.
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple

import asyncpg

from threadline._internal.periodic import Periodic
from threadline.events.base import Event
from threadline.events.codec import encode
from threadline.kafka.producer import Producer
from threadline.logging import get_logger
from threadline.store.db import Database

log = get_logger(__name__)


async def add(conn: asyncpg.Connection, topic: str, event: Event, *, key: str | None) -> Queued:
    """Insert ``event`` for ``topic`` in the current transaction; return the outbox id (a
    :class:`Queued`, which also holds the record)."""
    value, headers = encode(event)
    return await add_raw(conn, topic, value, key=key, headers=headers)


async def add_raw(conn: asyncpg.Connection, topic: str, value: bytes, *, key: str | None,
                  headers: list[tuple[str, bytes]]) -> Queued:
    """Insert a ready record (e.g. a chunk) in the current transaction; return the outbox id
    (a :class:`Queued`, which also holds the record)."""
    box_id = await conn.fetchval(
        "INSERT INTO outbox (topic, key, headers, value) VALUES ($1, $2, $3, $4) RETURNING id",
        topic, key, [[k, v.decode()] for k, v in headers], value)
    return Queued(box_id, _Row(box_id, topic, key, headers, value))


class _Row(NamedTuple):
    id: int
    topic: str
    key: str | None
    headers: list[tuple[str, bytes]]
    value: bytes


class Queued(int):
    """An outbox id that still holds its record: :meth:`Outbox.flush` publishes it after commit
    from memory instead of reading it back (one round trip fewer per flush). Compares, hashes
    and is stored as the plain id."""

    row: _Row

    def __new__(cls, box_id: int, row: _Row) -> Queued:
        obj = super().__new__(cls, box_id)
        obj.row = row
        return obj


_MARK = "UPDATE outbox SET published_at = now() WHERE id = ANY($1::bigint[])"


class Outbox:
    """Publishes outbox rows and marks them published."""

    def __init__(self, db: Database, producer: Producer) -> None:
        self._db = db
        self._producer = producer
        self._unmarked: list[int] = []
        self._marker: asyncio.Task[None] | None = None

    async def publish_stored(self, box_id: int, topic: str, key: str | None, value: bytes,
                             headers: list[tuple[str, bytes]]) -> None:
        """Publish a row just committed by the caller from what it holds in memory (no read back)
        and wait for the acknowledgement; the row is marked published shortly after, together with
        the others acknowledged meanwhile (one ``UPDATE`` for all). A row whose mark is lost (a
        crash, a failed update) is published again by the relay: consumers drop the duplicate."""
        await (await self._producer.send_raw(topic, value, key=key, headers=headers))
        self._mark_soon([box_id])

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
                await self._db.execute(_MARK, ids)
            except Exception:  # the relay publishes them again; duplicates are dropped
                log.warning("outbox marks failed; the relay republishes", count=len(ids), exc_info=True)

    async def flush(self, ids: list[int]) -> None:
        """Publish the given rows (in id order) after their transaction committed, wait for
        acks; they are marked published shortly after (:meth:`publish_stored`). Ids returned by
        :func:`add` (:class:`Queued`) are published from memory; plain ids are read back (and
        skipped when already published)."""
        if not ids:
            return
        rows = [i.row for i in ids if isinstance(i, Queued)]
        unknown = [int(i) for i in ids if not isinstance(i, Queued)]
        if unknown:
            rows += [_Row(r["id"], r["topic"], r["key"], [(k, v.encode()) for k, v in r["headers"]], r["value"])
                     for r in await self._db.fetch(
                         "SELECT id, topic, key, headers, value FROM outbox WHERE id = ANY($1::bigint[]) "
                         "AND published_at IS NULL ORDER BY id", unknown)]
        if rows:  # no pooled connection is held while Kafka acknowledges
            rows.sort(key=lambda r: r.id)
            await self._send(rows)
            self._mark_soon([r.id for r in rows])

    async def _send(self, rows: list[_Row]) -> None:
        """Send ``rows`` in order and wait for every acknowledgement."""
        futures = [await self._producer.send_raw(r.topic, r.value, key=r.key, headers=r.headers) for r in rows]
        await asyncio.gather(*futures)

    async def relay_once(self, *, older_than_s: float = 2.0, limit: int = 500) -> int:
        """Publish rows left unpublished for ``older_than_s``; return how many."""
        async with self._db.transaction() as conn:
            rows = await conn.fetch(
                "SELECT id, topic, key, headers, value FROM outbox WHERE published_at IS NULL "
                "AND created_at < now() - make_interval(secs => $1) ORDER BY id LIMIT $2 "
                "FOR UPDATE SKIP LOCKED", older_than_s, limit)
            if rows:
                await self._send([_Row(r["id"], r["topic"], r["key"], [(k, v.encode()) for k, v in r["headers"]],
                                       r["value"]) for r in rows])
                await conn.execute(_MARK, [r["id"] for r in rows])
        if rows:
            log.info("outbox relay published leftovers", count=len(rows))
        return len(rows)


class OutboxRelay(Periodic):
    """Background task: every ``interval_s``, publish what a crash left in the outbox."""

    def __init__(self, outbox: Outbox, *, interval_s: float = 1.0) -> None:
        super().__init__("outbox-relay", interval_s, outbox.relay_once, failure="outbox relay failed")
