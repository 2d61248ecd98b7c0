"""The ``agents`` table (migration 0020): what clients may read about the agents the cluster
serves — id, name, description, static ``metadata``, memory options."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import asyncpg
import orjson

from threadline.runtime.agent import Agent


def agent_row(agent: Agent) -> tuple[str, str, str | None, str | None, str, str | None]:
    """``(agent_id, name, description, metadata JSON or None, memory JSON, voice JSON or None)`` of one agent;
    metadata given as a function of the request context is stored as ``None``.

    Raises:
        TypeError: static metadata that is not JSON-serialisable.
    """
    metadata = None if callable(agent.metadata) else orjson.dumps(agent.metadata).decode()
    voice = orjson.dumps(agent.voice.to_json()).decode() if agent.voice is not None else None
    return (agent.id, agent.name, agent.description, metadata, orjson.dumps(agent.memory.to_json()).decode(),
            voice)


async def publish_agents(conn: asyncpg.Connection, agents: Iterable[Agent]) -> None:
    """Upsert the rows of ``agents`` (an instance starting with the agents module it loaded)."""
    await conn.executemany(
        "INSERT INTO agents (agent_id, name, description, metadata, memory, voice) "
        "VALUES ($1, $2, $3, $4::text::jsonb, $5::text::jsonb, $6::text::jsonb) "
        "ON CONFLICT (agent_id) DO UPDATE SET name = EXCLUDED.name, description = EXCLUDED.description, "
        "metadata = EXCLUDED.metadata, memory = EXCLUDED.memory, voice = EXCLUDED.voice, updated_at = now()",
        [agent_row(a) for a in agents])


async def read_agent(conn: asyncpg.Connection, agent_id: str) -> dict[str, Any] | None:
    """``{id, name, description, metadata, memory, dynamic_metadata, voice}`` of one agent, or ``None``
    (``voice``: ``{speak_model, listen_model, speaker, response_format}`` or ``None``)."""
    # jsonb read as text: the same on a pooled connection (a jsonb codec) and a plain one
    row = await conn.fetchrow("SELECT agent_id, name, description, metadata::text AS metadata, memory::text AS memory, "
                              "voice::text AS voice FROM agents WHERE agent_id = $1", agent_id)
    if row is None:
        return None
    metadata = orjson.loads(row["metadata"]) if row["metadata"] is not None else None
    return {"id": row["agent_id"], "name": row["name"], "description": row["description"],
            "metadata": metadata if metadata is not None else {}, "dynamic_metadata": metadata is None,
            "memory": orjson.loads(row["memory"]), "voice": orjson.loads(row["voice"]) if row["voice"] else None}


async def read_thread(conn: asyncpg.Connection, resource_id: str, thread_id: str) -> dict[str, Any] | None:
    """``{id, resource_id, title, metadata, created_at, updated_at}`` of the resource's thread, or ``None``."""
    row = await conn.fetchrow("SELECT thread_id, resource_id, title, metadata::text AS metadata, created_at, updated_at "
                              "FROM threads WHERE thread_id = $1 AND resource_id = $2", thread_id, resource_id)
    if row is None:
        return None
    return {"id": row["thread_id"], "resource_id": row["resource_id"], "title": row["title"],
            "metadata": orjson.loads(row["metadata"]),
            "created_at": row["created_at"].isoformat(), "updated_at": row["updated_at"].isoformat()}
