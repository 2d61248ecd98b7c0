"""Transactional outbox, the rows: events written in the same transaction as the effect they announce.

``add`` inserts within the caller's transaction; after commit the caller calls
:meth:`~threadline.flows.publish.Outbox.flush` with the returned ids (low latency), and
:class:`~threadline.flows.publish.OutboxRelay` publishes whatever a crash left behind. A record
may be published twice (crash between publish and mark); consumers drop duplicate event ids.
"""

from __future__ import annotations

from typing import NamedTuple

import asyncpg

from threadline.events.base import Event
from threadline.events.codec import encode
from threadline.store.db import Database


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
        topic, key, stored_headers(headers), value)
    return queued(box_id, topic, key, headers, value)


def stored_headers(headers: list[tuple[str, bytes]]) -> list[list[str]]:
    """Kafka headers as the ``outbox.headers`` column holds them: ``[[name, value as text], …]``."""
    return [[k, v.decode()] for k, v in headers]


def queued(box_id: int, topic: str, key: str | None, headers: list[tuple[str, bytes]], value: bytes) -> Queued:
    """The :class:`Queued` id of an outbox row inserted with this record."""
    return Queued(box_id, OutboxRow(box_id, topic, key, headers, value))


class OutboxRow(NamedTuple):
    """One outbox row: the Kafka record it holds and its outbox id."""

    id: int
    topic: str
    key: str | None
    headers: list[tuple[str, bytes]]
    value: bytes

    @classmethod
    def of(cls, r: asyncpg.Record) -> OutboxRow:
        return cls(r["id"], r["topic"], r["key"], [(k, v.encode()) for k, v in r["headers"]], r["value"])


class Queued(int):
    """An outbox id that still holds its record: :meth:`~threadline.flows.publish.Outbox.flush` publishes it after commit
    from memory instead of reading it back (one round trip fewer per flush). Compares, hashes
    and is stored as the plain id."""

    row: OutboxRow

    def __new__(cls, box_id: int, row: OutboxRow) -> Queued:
        obj = super().__new__(cls, box_id)
        obj.row = row
        return obj


_COLUMNS = "id, topic, key, headers, value"


async def unpublished(db: Database, ids: list[int]) -> list[OutboxRow]:
    """The rows among ``ids`` not published yet, in id order (a read-back for
    :meth:`~threadline.flows.publish.Outbox.flush`)."""
    return [OutboxRow.of(r) for r in await db.fetch(
        f"SELECT {_COLUMNS} FROM outbox WHERE id = ANY($1::bigint[]) AND published_at IS NULL ORDER BY id", ids)]


async def mark_published(db: Database | asyncpg.Connection, ids: list[int]) -> None:
    """Mark the rows ``ids`` published (Kafka acknowledged them)."""
    await db.execute("UPDATE outbox SET published_at = now() WHERE id = ANY($1::bigint[])", ids)


async def lock_leftovers(conn: asyncpg.Connection, *, older_than_s: float, limit: int) -> list[OutboxRow]:
    """Lock and return, in id order, at most ``limit`` rows left unpublished for ``older_than_s``
    seconds, skipping rows another relay holds and rows of a chunk topic the idle-topic sweep is
    deleting (they wait for a later pass). Runs in the caller's transaction, which holds the locks
    while the rows are published."""
    return [OutboxRow.of(r) for r in await conn.fetch(
        f"SELECT {_COLUMNS} FROM outbox WHERE published_at IS NULL "
        "AND created_at < now() - make_interval(secs => $1) AND NOT EXISTS (SELECT 1 FROM "
        "chunk_topics c WHERE c.topic = outbox.topic AND c.state = 'deleting') ORDER BY id LIMIT $2 "
        "FOR UPDATE OF outbox SKIP LOCKED", older_than_s, limit)]


async def unpublish(conn: Database | asyncpg.Connection, ids: list[int]) -> None:
    """Mark the rows ``ids`` unpublished again: the relay publishes them once more (same event
    ids, so a consumer that handled one drops the copy)."""
    await conn.execute("UPDATE outbox SET published_at = NULL WHERE id = ANY($1::bigint[])", ids)
