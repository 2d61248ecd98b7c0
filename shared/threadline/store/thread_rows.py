"""Thread rows written outside a run (Mastra's ``createThread`` / ``updateThread`` through the
gateway's memory API, decision 132). Ingress creates a thread with its first request; a thread
created here first is the same row, and ingress keeps it (its insert only fills what is missing
for the same resource). A thread belongs to one resource for good: neither function touches
another resource's thread. :func:`delete_thread` deletes a thread and what is read through it
(Mastra's ``deleteThread``, decision 156).
"""

from __future__ import annotations

from typing import Literal

import orjson

from threadline.events.json_types import JSONObject
from threadline.events.rows import ThreadDetails
from threadline.store.db import Database
from threadline.store.queries import Conn, read_thread

DeleteOutcome = Literal["deleted", "missing", "active"]


async def create_thread(conn: Conn, *, thread_id: str, resource_id: str, title: str | None,
                        metadata: JSONObject | None) -> ThreadDetails | None:
    """Create the resource's thread ``thread_id`` (kept as it is when the resource has it
    already); the row as :func:`threadline.store.queries.read_thread` reads it, or ``None`` when
    the id is another resource's thread."""
    await conn.execute(
        "INSERT INTO threads (thread_id, resource_id, title, metadata) VALUES ($1, $2, $3, coalesce($4::text::jsonb, '{}'))"
        " ON CONFLICT (thread_id) DO NOTHING",
        thread_id, resource_id, title, None if metadata is None else orjson.dumps(metadata).decode())
    return await read_thread(conn, resource_id, thread_id)


async def update_thread(conn: Conn, *, thread_id: str, resource_id: str, title: str | None,
                        metadata: JSONObject | None) -> ThreadDetails | None:
    """Set the title and/or replace the metadata (``None``: unchanged) of the resource's thread,
    as Mastra's ``updateThread`` does; the new row, or ``None`` when the resource has no such thread."""
    await conn.execute(
        "UPDATE threads SET title = coalesce($3, title), metadata = coalesce($4::text::jsonb, metadata), updated_at = now() "
        "WHERE thread_id = $1 AND resource_id = $2",
        thread_id, resource_id, title, None if metadata is None else orjson.dumps(metadata).decode())
    return await read_thread(conn, resource_id, thread_id)


async def delete_thread(db: Database, *, thread_id: str, resource_id: str) -> DeleteOutcome:
    """Delete the resource's thread as Mastra's ``deleteThread`` does: the thread row, its
    messages, its signals, its inbox (notifications) and its state-signal lanes, in one
    transaction. Kept: its runs (readable by run id), its lease row (the fencing epoch goes on
    growing if the id is used again) and its chunk topic (left to the idle-topic sweep).

    Returns ``"deleted"``; ``"missing"`` when the resource has no such thread; ``"active"`` (and
    nothing is deleted) while a run of the thread is running — the lease row is locked first, so
    a run that ingress is starting either commits before (then ``"active"``) or after the delete
    (then it starts on an empty thread).
    """
    async with db.transaction() as conn:
        if await conn.fetchval("SELECT 1 FROM threads WHERE thread_id = $1 AND resource_id = $2 FOR UPDATE",
                               thread_id, resource_id) is None:
            return "missing"
        await conn.execute("SELECT 1 FROM thread_leases WHERE thread_id = $1 FOR UPDATE", thread_id)
        if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM runs WHERE thread_id = $1 AND status = 'running')",
                               thread_id):
            return "active"
        for table in ("messages", "signals", "notifications", "state_lanes"):
            await conn.execute(f"DELETE FROM {table} WHERE thread_id = $1", thread_id)  # table: one of the literals above
        await conn.execute("DELETE FROM threads WHERE thread_id = $1", thread_id)
    return "deleted"
