"""Thread rows written outside a run (Mastra's ``createThread`` / ``updateThread`` through the
gateway's memory API, decision 132). Ingress creates a thread with its first request; a thread
created here first is the same row, and ingress keeps it (its insert only fills what is missing
for the same resource). A thread belongs to one resource for good: neither function touches
another resource's thread.
"""

from __future__ import annotations

import orjson

from threadline.events.json_types import JSONObject
from threadline.events.rows import ThreadDetails
from threadline.store.queries import Conn, read_thread


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
