"""Inbox access for applications and tools: list, read, mark seen, dismiss, archive
— always within one thread (``resource_id`` + ``thread_id``, docs/decisions.md §16). Used by the client
(:meth:`ThreadlineClient.inbox` …), the CLI (``threadline inbox``) and the agent tool
(:func:`threadline.flows.inbox_tool.inbox_tool`).
"""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

MARKS = {"seen": "seen_at", "dismissed": "dismissed_at", "archived": "archived_at"}
"""Status → the timestamp it stamps."""
_LIST_COLUMNS = ("id, source, kind, priority, status, summary, coalesced_count, coalesce_key, dedupe_key, "
                 "attributes, delivery_reason, delivery_attempts, last_delivery_error, summarized, held, "
                 "deliver_at, summary_at, created_at, updated_at, delivered_at, seen_at, dismissed_at, archived_at")


async def _json(conn: asyncpg.Connection) -> None:
    for kind in ("jsonb", "json"):
        await conn.set_type_codec(kind, encoder=lambda v: orjson.dumps(v).decode(), decoder=orjson.loads,
                                  schema="pg_catalog")


def _view(row: asyncpg.Record) -> dict[str, Any]:
    out = dict(row)
    for k, v in out.items():
        if hasattr(v, "isoformat"):
            out[k] = v.isoformat()
    return out


async def list_records(conn: asyncpg.Connection, *, resource_id: str, thread_id: str,
                       status: str | None = None) -> list[dict[str, Any]]:
    """The thread's records, oldest first, without ``payload`` (``status`` filters)."""
    await _json(conn)
    rows = await conn.fetch(f"SELECT {_LIST_COLUMNS} FROM notifications WHERE thread_id = $1 AND resource_id = $2 "
                            "AND ($3::text IS NULL OR status = $3) ORDER BY created_at, id", thread_id, resource_id,
                            status)
    return [_view(r) for r in rows]


async def read_record(conn: asyncpg.Connection, *, resource_id: str, thread_id: str,
                      record_id: str) -> dict[str, Any] | None:
    """One record with its ``payload`` and ``metadata`` (never shown to the model otherwise)."""
    await _json(conn)
    row = await conn.fetchrow(f"SELECT {_LIST_COLUMNS}, payload, metadata FROM notifications WHERE id = $1 "
                              "AND thread_id = $2 AND resource_id = $3", record_id, thread_id, resource_id)
    return _view(row) if row else None


async def mark(conn: asyncpg.Connection, *, resource_id: str, thread_id: str, record_id: str,
               status: str) -> dict[str, Any] | None:
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
