"""The ``agents`` table (migration 0020): what clients may read about the agents the cluster
serves — id, name, description, static ``metadata``, memory options; and (migration 0021) what
the editor may change, the code's instructions and tool descriptions, and the stored editor
overrides (``agent_overrides``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import asyncpg
import orjson

from threadline.runtime.agent import Agent
from threadline.runtime.editor import editor_policy, strip


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


def editor_row(agent: Agent) -> tuple[str, str | None, str | None]:
    """``(editor policy JSON, the code's instructions as text or None, {tool_id: description}
    JSON or None)``: ``None`` where the code gives a function of the request context."""
    instructions = None if agent.dynamic_instructions else "\n\n".join(
        m["content"] if isinstance(m["content"], str) else orjson.dumps(m["content"]).decode()
        for m in agent.system_messages())
    tools = None if "tools" in agent.dynamic else orjson.dumps({t.id: t.description for t in agent.tools.values()})
    return orjson.dumps(agent.editor.to_json()).decode(), instructions, None if tools is None else tools.decode()


async def publish_agents(conn: asyncpg.Connection, agents: Iterable[Agent]) -> None:
    """Upsert the rows of ``agents`` (an instance starting with the agents module it loaded), and
    strip from their stored editor overrides what their code now locks (decision 68)."""
    agents = list(agents)
    await conn.executemany(
        "INSERT INTO agents (agent_id, name, description, metadata, memory, voice, editor, instructions, tools) "
        "VALUES ($1, $2, $3, $4::text::jsonb, $5::text::jsonb, $6::text::jsonb, $7::text::jsonb, $8, $9::text::jsonb) "
        "ON CONFLICT (agent_id) DO UPDATE SET name = EXCLUDED.name, description = EXCLUDED.description, "
        "metadata = EXCLUDED.metadata, memory = EXCLUDED.memory, voice = EXCLUDED.voice, editor = EXCLUDED.editor, "
        "instructions = EXCLUDED.instructions, tools = EXCLUDED.tools, updated_at = now()",
        [agent_row(a) + editor_row(a) for a in agents])
    stored = {r["agent_id"]: orjson.loads(r["overrides"]) for r in await conn.fetch(
        "SELECT agent_id, overrides::text AS overrides FROM agent_overrides WHERE agent_id = ANY($1::text[])",
        [a.id for a in agents])}
    for agent in agents:
        if agent.id in stored:
            kept, stripped = strip(agent.editor, stored[agent.id],
                                   None if "tools" in agent.dynamic else agent.tools)
            if stripped:
                await conn.execute("UPDATE agent_overrides SET overrides = $2::text::jsonb, updated_at = now() "
                                   "WHERE agent_id = $1", agent.id, orjson.dumps(kept).decode())


async def read_editable(conn: asyncpg.Connection, agent_id: str) -> dict[str, Any] | None:
    """What the editor shows of an agent: ``{id, name, editor: {instructions, tools: {description}},
    code: {instructions, tools}, overrides, updated_at}`` (``code`` fields ``None`` where the code
    gives a function), or ``None`` for an agent the cluster does not serve."""
    row = await conn.fetchrow(
        "SELECT a.agent_id, a.name, a.editor::text AS editor, a.instructions, a.tools::text AS tools, "
        "o.overrides::text AS overrides, o.updated_at FROM agents a "
        "LEFT JOIN agent_overrides o ON o.agent_id = a.agent_id WHERE a.agent_id = $1", agent_id)
    if row is None:
        return None
    policy = editor_policy(orjson.loads(row["editor"]) if row["editor"] else None, agent_id=agent_id)
    return {"id": row["agent_id"], "name": row["name"], "editor": policy.to_json(),
            "code": {"instructions": row["instructions"],
                     "tools": orjson.loads(row["tools"]) if row["tools"] is not None else None},
            "overrides": orjson.loads(row["overrides"]) if row["overrides"] else {},
            "updated_at": row["updated_at"].isoformat() if row["updated_at"] else None}


async def write_overrides(conn: asyncpg.Connection, agent_id: str, overrides: dict[str, Any], *,
                          by: str) -> None:
    """Store an agent's editor overrides (already stripped), replacing what was stored."""
    await conn.execute(
        "INSERT INTO agent_overrides (agent_id, overrides, updated_by) VALUES ($1, $2::text::jsonb, $3) "
        "ON CONFLICT (agent_id) DO UPDATE SET overrides = EXCLUDED.overrides, updated_by = EXCLUDED.updated_by, "
        "updated_at = now()", agent_id, orjson.dumps(overrides).decode(), by)


async def list_agents(conn: asyncpg.Connection) -> list[dict[str, Any]]:
    """``[{id, name, description}]`` of every agent the cluster serves, by id."""
    rows = await conn.fetch("SELECT agent_id, name, description FROM agents ORDER BY agent_id")
    return [{"id": r["agent_id"], "name": r["name"], "description": r["description"]} for r in rows]


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
