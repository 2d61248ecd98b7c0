"""Big payloads by reference, kept in PostgreSQL: a record body over ``Settings.max_record_bytes``
is stored in the ``payloads`` table (migration 0008) and the Kafka record carries a reference
(the wire format is in :mod:`threadline.kafka.payloads`). Another Kafka client sees the
reference JSON and can read the body with ``SELECT body FROM payloads WHERE id = $1``.

Payload rows are immutable and never updated; they are not deleted automatically (a record may be
replayed from offset 0 for as long as the topic keeps it).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import asyncpg

from threadline.ids import new_id
from threadline.logging import get_logger

log = get_logger(__name__)
__all__ = ["PayloadStore"]


class RowSource(Protocol):
    """A pool that runs one query and returns its first row (``store.db.Database``)."""

    async def fetchrow(self, query: str, *args: object) -> asyncpg.Record | None: ...


class PayloadStore:
    """The :class:`~threadline.kafka.payloads.PayloadRefs` of Threadline, in PostgreSQL: reads and
    writes spilled payloads through a service's pool (``db``) or, for a client, a connection of
    its own opened on first use (``dsn``)."""

    def __init__(self, *, db: RowSource | None = None, dsn: str | None = None, statement_cache: bool = True) -> None:
        if (db is None) == (dsn is None):
            raise ValueError("give either db or dsn")
        self._db = db
        self._dsn = dsn
        self._statement_cache = statement_cache
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()

    async def _run(self, query: str, *args: object) -> asyncpg.Record | None:
        if self._db is not None:
            return await self._db.fetchrow(query, *args)
        async with self._lock:
            if self._conn is None or self._conn.is_closed():
                self._conn = await asyncpg.connect(self._dsn, statement_cache_size=100 if self._statement_cache else 0)
            return await self._conn.fetchrow(query, *args)

    async def put(self, body: bytes, *, topic: str | None = None) -> str:
        """Store ``body``; return its id."""
        pid = new_id("pl")
        await self._run("INSERT INTO payloads (id, topic, size, body) VALUES ($1, $2, $3, $4) RETURNING id",
                        pid, topic, len(body), body)
        log.info("payload stored by reference", payload_id=pid, topic=topic, bytes=len(body))
        return pid

    async def get(self, pid: str) -> bytes | None:
        row = await self._run("SELECT body FROM payloads WHERE id = $1", pid)
        return None if row is None else bytes(row["body"])

    async def close(self) -> None:
        if self._conn is not None and not self._conn.is_closed():
            await self._conn.close()
        self._conn = None
