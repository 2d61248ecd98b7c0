"""Inbox access for applications and tools: list, read, mark seen, dismiss, archive
— always within one thread (``resource_id`` + ``thread_id``, docs/decisions.md §16). Used by the client
(:meth:`ThreadlineClient.inbox` …), the CLI (``threadline inbox``) and the agent tool
(:func:`threadline.flows.inbox_tool.inbox_tool`).
"""

from __future__ import annotations

from datetime import datetime

import asyncpg
import orjson

from threadline.events.rows import InboxRecord
from threadline.store import paging

MARKS = {"seen": "seen_at", "dismissed": "dismissed_at", "archived": "archived_at"}
"""Status → the timestamp it stamps."""
_LIST_COLUMNS = ("id, source, kind, priority, status, summary, coalesced_count, coalesce_key, dedupe_key, "
                 "attributes, delivery_reason, delivery_attempts, last_delivery_error, summarized, held, "
                 "deliver_at, summary_at, created_at, updated_at, delivered_at, seen_at, dismissed_at, archived_at")


async def _json(conn: asyncpg.Connection) -> None:
    for kind in ("jsonb", "json"):
        await conn.set_type_codec(kind, encoder=lambda v: orjson.dumps(v).decode(), decoder=orjson.loads,
                                  schema="pg_catalog")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _view(row: asyncpg.Record, *, with_payload: bool = False) -> InboxRecord:
    """The record with its times as ISO-8601 text (``payload`` and ``metadata`` when selected)."""
    out: InboxRecord = {
        "id": row["id"], "source": row["source"], "kind": row["kind"], "priority": row["priority"],
        "status": row["status"], "summary": row["summary"], "coalesced_count": row["coalesced_count"],
        "coalesce_key": row["coalesce_key"], "dedupe_key": row["dedupe_key"], "attributes": row["attributes"],
        "delivery_reason": row["delivery_reason"], "delivery_attempts": row["delivery_attempts"],
        "last_delivery_error": row["last_delivery_error"], "summarized": row["summarized"], "held": row["held"],
        "deliver_at": _iso(row["deliver_at"]), "summary_at": _iso(row["summary_at"]),
        "created_at": row["created_at"].isoformat(), "updated_at": row["updated_at"].isoformat(),
        "delivered_at": _iso(row["delivered_at"]), "seen_at": _iso(row["seen_at"]),
        "dismissed_at": _iso(row["dismissed_at"]), "archived_at": _iso(row["archived_at"])}
    if with_payload:
        out["payload"] = row["payload"]
        out["metadata"] = row["metadata"]
    return out


async def page_records(conn: asyncpg.Connection, *, resource_id: str, thread_id: str, status: str | None = None,
                       cursor: str | None = None, limit: int = paging.DEFAULT_LIMIT) -> tuple[list[InboxRecord], str | None]:
    """One page of the thread's records, oldest first (``(created_at, id)``, a total order),
    without ``payload`` (``status`` filters): at most ``limit``, and the next page's cursor
    (``None``: none follows; decision 221).

    Raises:
        threadline.store.paging.CursorError: ``cursor`` is not an inbox cursor.
    """
    await _json(conn)
    after = paging.after_time("inbox", cursor)
    at, record_id = after if after is not None else (None, "")
    rows = await conn.fetch(f"SELECT {_LIST_COLUMNS} FROM notifications WHERE thread_id = $1 AND resource_id = $2 "
                            "AND ($3::text IS NULL OR status = $3) "
                            "AND ($4::timestamptz IS NULL OR (created_at, id) > ($4::timestamptz, $5::text)) "
                            "ORDER BY created_at, id LIMIT $6 + 1", thread_id, resource_id, status, at, record_id, limit)
    count, more = paging.kept([i < limit for i in range(len(rows))])
    last = rows[count - 1] if more else None
    return [_view(r) for r in rows[:count]], None if last is None else paging.time_cursor(
        "inbox", last["created_at"], last["id"])


async def list_records(conn: asyncpg.Connection, *, resource_id: str, thread_id: str,
                       status: str | None = None) -> list[InboxRecord]:
    """All the thread's records, oldest first, without ``payload`` (``status`` filters), read
    page by page (:func:`page_records`)."""
    return await paging.every_row(lambda cursor: page_records(
        conn, resource_id=resource_id, thread_id=thread_id, status=status, cursor=cursor, limit=paging.MAX_LIMIT))


async def read_record(conn: asyncpg.Connection, *, resource_id: str, thread_id: str,
                      record_id: str) -> InboxRecord | None:
    """One record with its ``payload`` and ``metadata`` (never shown to the model otherwise)."""
    await _json(conn)
    row = await conn.fetchrow(f"SELECT {_LIST_COLUMNS}, payload, metadata FROM notifications WHERE id = $1 "
                              "AND thread_id = $2 AND resource_id = $3", record_id, thread_id, resource_id)
    return _view(row, with_payload=True) if row else None


async def mark(conn: asyncpg.Connection, *, resource_id: str, thread_id: str, record_id: str,
               status: str) -> InboxRecord | None:
    """Set the record's status to ``seen``, ``dismissed`` or ``archived`` (stamping ``<status>_at``).
    A marked record is no longer pending, so the scheduler never delivers it.

    Returns:
        The updated record, or ``None`` if the thread has no such record.
    Raises:
        ValueError: another status.
    """
    if status not in MARKS:
        raise ValueError(f"status must be one of {sorted(MARKS)}, not {status!r}")
    await _json(conn)
    row = await conn.fetchrow(
        f"UPDATE notifications SET status = $4, {MARKS[status]} = now(), deliver_at = NULL, summary_at = NULL, "
        f"held = false, updated_at = now() WHERE id = $1 AND thread_id = $2 AND resource_id = $3 "
        f"RETURNING {_LIST_COLUMNS}", record_id, thread_id, resource_id, status)
    return _view(row) if row else None
