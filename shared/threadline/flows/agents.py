"""Publishing the agents an instance serves, and what the editor shows of one (decisions 62, 68):
the rows are computed from the code's :class:`~threadline.runtime.agent.Agent` here and written by
:mod:`threadline.store.agents`; clients read them with :mod:`threadline.store.queries`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import asyncpg
import orjson

from threadline.runtime.agent import Agent
from threadline.runtime.editor import editor_policy, strip
from threadline.store import agents as rows


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
    await rows.upsert_agents(conn, [agent_row(a) + editor_row(a) for a in agents])
    stored = await rows.stored_overrides(conn, [a.id for a in agents])
    for agent in agents:
        if agent.id in stored:
            kept, stripped = strip(agent.editor, stored[agent.id],
                                   None if "tools" in agent.dynamic else agent.tools)
            if stripped:
                await rows.replace_overrides(conn, agent.id, kept)


async def read_editable(conn: asyncpg.Connection, agent_id: str) -> dict[str, Any] | None:
    """What the editor shows of an agent: ``{id, name, editor: {instructions, tools: {description}},
    code: {instructions, tools}, overrides, updated_at, version}`` (``version``: of the stored
    overrides, 0 when none; ``code`` fields ``None`` where the code
    gives a function), or ``None`` for an agent the cluster does not serve."""
    row = await rows.editable_row(conn, agent_id)
    if row is None:
        return None
    policy = editor_policy(row["editor"], agent_id=agent_id)
    return {"id": row["agent_id"], "name": row["name"], "editor": policy.to_json(),
            "code": {"instructions": row["instructions"], "tools": row["tools"]},
            "overrides": row["overrides"] or {},
            "updated_at": row["updated_at"].isoformat() if row["updated_at"] else None,
            "version": row["version"]}
