"""Big payloads by reference (issue 6 item 8): a record body over ``Settings.max_record_bytes``
is stored in PostgreSQL (``payloads``, migration 0008) and the Kafka record carries a reference.

On the wire a spilled record keeps its key and headers (``tl-type``, ``tl-event-id``… so
routing and dedupe work unchanged), gains the header ``tl-payload-ref: <id>``, and its value is
``{"payload_ref": "<id>", "bytes": <size of the original body>}``. :func:`resolve` puts the
original body back; every consumer of the project resolves before decoding (the services in
``kafka.handling.guarded``, the client's subscriptions and reply listener), so handlers and
subscribers never see the reference. Another Kafka client sees the reference JSON and can read
the body with ``SELECT body FROM payloads WHERE id = $1``.

Payload rows are immutable and never updated; they are not deleted automatically (a record may be
replayed from offset 0 for as long as the topic keeps it).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import asyncpg
import orjson

from threadline.errors import InvalidEventError
from threadline.events.codec import Headers, header
from threadline.ids import new_id
from threadline.logging import get_logger

log = get_logger(__name__)

REF_HEADER = "tl-payload-ref"


class PayloadStore:
    """Reads and writes spilled payloads, through a service's pool (``db``) or, for a client, a
    connection of its own opened on first use (``dsn``)."""

    def __init__(self, *, db: Any = None, dsn: str | None = None, statement_cache: bool = True) -> None:
        if (db is None) == (dsn is None):
            raise ValueError("give either db or dsn")
        self._db = db
        self._dsn = dsn
        self._statement_cache = statement_cache
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()

    async def _run(self, query: str, *args: Any) -> Any:
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


def reference(pid: str, size: int) -> bytes:
    """The value of a record whose body was stored as ``pid``."""
    return orjson.dumps({"payload_ref": pid, "bytes": size})


def with_ref_header(headers: Headers | None, pid: str) -> Headers:
    return [*(headers or []), (REF_HEADER, pid.encode())]


async def resolve(record: Any, store: PayloadStore | None) -> Any:
    """``record`` with its stored body back in ``value`` (the record itself when it carries no
    reference).

    Raises:
        InvalidEventError: ``payload_missing`` when the referenced body is not in the store (or
            there is no store to ask).
    """
    pid = header(getattr(record, "headers", None), REF_HEADER)
    if pid is None:
        return record
    body = await store.get(pid) if store is not None else None
    if body is None:
        raise InvalidEventError(f"payload {pid!r} referenced by the record is not stored", code="payload_missing")
    return dataclasses.replace(record, value=body)
