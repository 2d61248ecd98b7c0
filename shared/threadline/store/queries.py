"""The read model: what the gateway, the CLI and the client read of threads, messages, runs and
agents, each query written once here. Scores are read with :func:`threadline.store.scores.list_scores`
and inbox records with :mod:`threadline.store.inbox_access`.

Every function takes a service's pool (:class:`~threadline.store.db.Database`) or one connection
(:func:`~threadline.store.db.connect`) as ``conn``, and reads ``jsonb`` columns as text and decodes
them here, so a row reads the same on either. Rows come back as plain dicts; times are
``datetime`` (UTC) unless a docstring says ISO text. A thread of another resource reads as a
thread that does not exist.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypeAlias

import asyncpg
import orjson

from threadline.events.json_types import JSONObject
from threadline.events.rows import AgentDetails, AgentSummary, MessageRow, RunRow, ThreadDetails, ThreadSummary
from threadline.store import paging
from threadline.store.db import Database

Conn: TypeAlias = Database | asyncpg.Connection
"""A pool or one connection: anything with asyncpg's ``fetch`` and ``fetchrow``."""


def _json(text: str | None) -> JSONObject | None:
    """A JSON object column read as text, decoded (``None`` for SQL ``NULL``)."""
    return None if text is None else orjson.loads(text)


# --- threads ------------------------------------------------------------------------------------
async def thread_owner(conn: Conn, thread_id: str) -> str | None:
    """The resource id owning ``thread_id``, or ``None`` when there is no such thread."""
    row = await conn.fetchrow("SELECT resource_id FROM threads WHERE thread_id = $1", thread_id)
    return None if row is None else str(row["resource_id"])


async def list_threads(conn: Conn, *, resource_id: str, limit: int = 100) -> list[ThreadSummary[datetime]]:
    """``[{id, title, metadata, created_at, updated_at}]`` of the resource's threads, the most
    recently updated first, at most ``limit`` (a positive count)."""
    rows = await conn.fetch(
        "SELECT thread_id, title, metadata::text AS metadata, created_at, updated_at FROM threads "
        "WHERE resource_id = $1 ORDER BY updated_at DESC, thread_id LIMIT $2", resource_id, limit)
    return [{"id": r["thread_id"], "title": r["title"], "metadata": orjson.loads(r["metadata"]),
             "created_at": r["created_at"], "updated_at": r["updated_at"]} for r in rows]


async def read_thread(conn: Conn, resource_id: str, thread_id: str) -> ThreadDetails | None:
    """``{id, resource_id, title, metadata, created_at, updated_at}`` of the resource's thread
    (times as ISO text), or ``None``."""
    row = await conn.fetchrow("SELECT thread_id, resource_id, title, metadata::text AS metadata, created_at, updated_at "
                              "FROM threads WHERE thread_id = $1 AND resource_id = $2", thread_id, resource_id)
    if row is None:
        return None
    return {"id": row["thread_id"], "resource_id": row["resource_id"], "title": row["title"],
            "metadata": orjson.loads(row["metadata"]),
            "created_at": row["created_at"].isoformat(), "updated_at": row["updated_at"].isoformat()}


# --- messages -----------------------------------------------------------------------------------
_MESSAGE_PAGE = (
    "SELECT id, position, run_id, role, type, created_at, CASE WHEN keep THEN content END AS content, keep FROM ("
    " SELECT p.*, (row_number() OVER w <= $4 AND sum(octet_length(content)) OVER w - octet_length(content) < $5)"
    " AS keep FROM (SELECT id, position, run_id, role, type, content::text AS content, created_at FROM messages"
    " WHERE thread_id = $1 AND resource_id = $2 AND position > $3 ORDER BY position LIMIT $4 + 1) p"
    " WINDOW w AS (ORDER BY position ROWS UNBOUNDED PRECEDING)) k ORDER BY position")


async def message_page(conn: Conn, *, resource_id: str, thread_id: str, cursor: str | None = None,
                       limit: int = paging.DEFAULT_LIMIT, max_bytes: int = paging.PAGE_BYTES
                       ) -> tuple[list[MessageRow[datetime]], str | None]:
    """One page of the thread's stored messages in thread order (``position``, a total order):
    rows ``[{id, run_id, role, type, content, created_at}]`` (``content`` Mastra's stored message
    content, ``{format: 2, parts, …}``), at most ``limit`` of them and about ``max_bytes`` of
    content (at least one), and the cursor of the next page (``None``: none follows). Empty for
    a thread of another resource, or none. One statement, bounded by the page (decision 221).

    Raises:
        threadline.store.paging.CursorError: ``cursor`` is not a messages cursor.
    """
    after = paging.after_position(cursor)
    rows = await conn.fetch(_MESSAGE_PAGE, thread_id, resource_id, after, limit, max_bytes)
    count, more = paging.kept([r["keep"] for r in rows])
    page: list[MessageRow[datetime]] = [
        {"id": r["id"], "run_id": r["run_id"], "role": r["role"], "type": r["type"],
         "content": orjson.loads(r["content"]), "created_at": r["created_at"]} for r in rows[:count]]
    return page, paging.position_cursor(rows[count - 1]["position"]) if more else None


async def list_messages(conn: Conn, *, resource_id: str, thread_id: str) -> list[MessageRow[datetime]]:
    """All the thread's stored messages in thread order (rows as :func:`message_page`), read page
    by page (each statement bounded; the list is what the caller asked for: the whole thread).
    Empty for a thread of another resource, or none."""
    return await paging.every_row(lambda cursor: message_page(
        conn, resource_id=resource_id, thread_id=thread_id, cursor=cursor, limit=paging.MAX_LIMIT))


# --- runs ---------------------------------------------------------------------------------------
_RUN_PAGE = (
    "SELECT run_id, agent_id, kind, status, step, steps_done, finish_reason, CASE WHEN keep THEN text END AS text,"
    " usage, error, tripwire, created_at, finished_at, keep FROM ("
    " SELECT p.*, (row_number() OVER w <= $5 AND sum(size) OVER w - size < $6) AS keep FROM ("
    "  SELECT run_id, agent_id, kind, status, step, steps_done, finish_reason, text, octet_length(coalesce(text, ''))"
    "  AS size, usage::text AS usage, error::text AS error, tripwire::text AS tripwire, created_at, finished_at"
    "  FROM runs WHERE thread_id = $1 AND resource_id = $2"
    "  AND ($3::timestamptz IS NULL OR (created_at, run_id) > ($3::timestamptz, $4::text))"
    "  ORDER BY created_at, run_id LIMIT $5 + 1) p"
    " WINDOW w AS (ORDER BY created_at, run_id ROWS UNBOUNDED PRECEDING)) k ORDER BY created_at, run_id")


async def run_page(conn: Conn, *, resource_id: str, thread_id: str, cursor: str | None = None,
                   limit: int = paging.DEFAULT_LIMIT, max_bytes: int = paging.PAGE_BYTES
                   ) -> tuple[list[RunRow[datetime]], str | None]:
    """One page of the thread's runs, oldest first (``(created_at, run_id)``, a total order):
    rows ``[{run_id, agent_id, kind, status, step, steps_done, finish_reason, text, usage,
    error, tripwire, created_at, finished_at}]`` (``usage``, ``error`` and ``tripwire`` decoded
    JSON or ``None``; ``finished_at`` ``None`` while running), at most ``limit`` and about
    ``max_bytes`` of ``text`` (at least one), and the next page's cursor (``None``: none follows).

    Raises:
        threadline.store.paging.CursorError: ``cursor`` is not a runs cursor.
    """
    after = paging.after_time("runs", cursor)
    at, run_id = after if after is not None else (None, "")
    rows = await conn.fetch(_RUN_PAGE, thread_id, resource_id, at, run_id, limit, max_bytes)
    count, more = paging.kept([r["keep"] for r in rows])
    page: list[RunRow[datetime]] = [
        {"run_id": r["run_id"], "agent_id": r["agent_id"], "kind": r["kind"], "status": r["status"],
         "step": r["step"], "steps_done": r["steps_done"], "finish_reason": r["finish_reason"], "text": r["text"],
         "usage": _json(r["usage"]), "error": _json(r["error"]), "tripwire": _json(r["tripwire"]),
         "created_at": r["created_at"], "finished_at": r["finished_at"]} for r in rows[:count]]
    last = rows[count - 1] if more else None
    return page, None if last is None else paging.time_cursor("runs", last["created_at"], last["run_id"])


async def list_runs(conn: Conn, *, resource_id: str, thread_id: str) -> list[RunRow[datetime]]:
    """All the thread's runs, oldest first (rows as :func:`run_page`), read page by page."""
    return await paging.every_row(lambda cursor: run_page(
        conn, resource_id=resource_id, thread_id=thread_id, cursor=cursor, limit=paging.MAX_LIMIT))


async def active_run(conn: Conn, *, resource_id: str, thread_id: str) -> str | None:
    """The id of the thread's active run: the run holding its unexpired lease; ``None`` when none
    does (also for a thread of another resource, or none at all)."""
    row = await conn.fetchrow(
        "SELECT run_id FROM thread_leases WHERE thread_id = $1 AND resource_id = $2 AND run_id IS NOT NULL "
        "AND expires_at > now()", thread_id, resource_id)
    return None if row is None else str(row["run_id"])


async def active_run_started(conn: Conn, *, resource_id: str, thread_id: str) -> tuple[str, int] | None:
    """``(run_id, created_at_ms)`` of the thread's active run (:func:`active_run`'s), for a reader
    that replays its chunks from its start; ``None`` when no run is active."""
    row = await conn.fetchrow(
        "SELECT r.run_id, (extract(epoch FROM r.created_at) * 1000)::bigint AS created_ms FROM thread_leases l "
        "JOIN runs r ON r.run_id = l.run_id WHERE l.thread_id = $1 AND l.resource_id = $2 AND l.run_id IS NOT NULL "
        "AND l.expires_at > now()", thread_id, resource_id)
    return None if row is None else (str(row["run_id"]), int(row["created_ms"]))


# --- agents -------------------------------------------------------------------------------------
async def list_agents(conn: Conn) -> list[AgentSummary]:
    """``[{id, name, description}]`` of every agent the cluster serves, by id."""
    rows = await conn.fetch("SELECT agent_id, name, description FROM agents ORDER BY agent_id")
    return [{"id": r["agent_id"], "name": r["name"], "description": r["description"]} for r in rows]


async def read_agent(conn: Conn, agent_id: str) -> AgentDetails | None:
    """``{id, name, description, metadata, memory, dynamic_metadata, voice}`` of one agent, or ``None``
    (``voice``: ``{speak_model, listen_model, speaker, response_format}`` or ``None``)."""
    row = await conn.fetchrow("SELECT agent_id, name, description, metadata::text AS metadata, memory::text AS memory, "
                              "voice::text AS voice FROM agents WHERE agent_id = $1", agent_id)
    if row is None:
        return None
    metadata = orjson.loads(row["metadata"]) if row["metadata"] is not None else None
    return {"id": row["agent_id"], "name": row["name"], "description": row["description"],
            "metadata": metadata if metadata is not None else {}, "dynamic_metadata": metadata is None,
            "memory": orjson.loads(row["memory"]), "voice": orjson.loads(row["voice"]) if row["voice"] else None}


# --- pages (Mastra's memory API on the gateway) -------------------------------------------------
_THREAD_ORDER = {("createdAt", False): "created_at ASC", ("createdAt", True): "created_at DESC",
                 ("updatedAt", False): "updated_at ASC", ("updatedAt", True): "updated_at DESC"}


async def _count(conn: Conn, query: str, *args: object) -> int:
    row = await conn.fetchrow(query, *args)
    return 0 if row is None else int(row[0])


async def page_threads(conn: Conn, *, resource_id: str, offset: int, limit: int, field: str = "createdAt",
                       descending: bool = True, metadata: JSONObject | None = None
                       ) -> tuple[list[ThreadSummary[datetime]], int]:
    """One page of the resource's threads (rows as :func:`list_threads`) ordered by ``field``
    (``createdAt`` or ``updatedAt``), only those whose metadata holds ``metadata``'s pairs when
    given, and the count of those threads.

    Raises:
        KeyError: another ``field``.
    """
    order = _THREAD_ORDER[(field, descending)]
    wanted = orjson.dumps(metadata or {}).decode()
    rows = await conn.fetch(  # the page alone: the count is its own statement, never a window over every row
        "SELECT thread_id, title, metadata::text AS metadata, created_at, updated_at "
        f"FROM threads WHERE resource_id = $1 AND metadata @> $4::text::jsonb ORDER BY {order}, thread_id "
        "OFFSET $2 LIMIT $3", resource_id, offset, limit, wanted)
    total = await _count(
        conn, "SELECT count(*) FROM threads WHERE resource_id = $1 AND metadata @> $2::text::jsonb", resource_id, wanted)
    return [{"id": r["thread_id"], "title": r["title"], "metadata": orjson.loads(r["metadata"]),
             "created_at": r["created_at"], "updated_at": r["updated_at"]} for r in rows], total


async def page_messages(conn: Conn, *, resource_id: str, thread_id: str, offset: int, limit: int,
                        descending: bool = False) -> tuple[list[MessageRow[datetime]], int]:
    """One page of the thread's stored messages (rows as :func:`list_messages`) in thread order
    (``descending``: newest first), and the thread's message count; ``([], 0)`` for a thread of
    another resource."""
    order = "DESC" if descending else "ASC"
    rows = await conn.fetch(  # the page alone: a count(*) OVER () would decode every message of the thread
        "SELECT id, run_id, role, type, content::text AS content, created_at "
        f"FROM messages WHERE thread_id = $1 AND resource_id = $2 ORDER BY position {order} OFFSET $3 LIMIT $4",
        thread_id, resource_id, offset, limit)
    total = await _count(
        conn, "SELECT count(*) FROM messages WHERE thread_id = $1 AND resource_id = $2", thread_id, resource_id)
    return [{"id": r["id"], "run_id": r["run_id"], "role": r["role"], "type": r["type"],
             "content": orjson.loads(r["content"]), "created_at": r["created_at"]} for r in rows], total


async def run_thread(conn: Conn, run_id: str) -> tuple[str, str] | None:
    """``(resource_id, thread_id)`` of run ``run_id``, or ``None`` for no such run."""
    row = await conn.fetchrow("SELECT resource_id, thread_id FROM runs WHERE run_id = $1", run_id)
    return None if row is None else (str(row["resource_id"]), str(row["thread_id"]))
