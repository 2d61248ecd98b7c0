"""The ``agents`` table (migration 0020) and the editor's ``agent_overrides`` (migration 0021):
the rows ingress publishes and the overrides the editor stores. Reads for clients are in
:mod:`threadline.store.queries`; what goes into a row is decided in :mod:`threadline.flows.agents`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
import orjson

AgentRow = tuple[str, str, str | None, str | None, str, str | None, str, str | None, str | None]
"""``(agent_id, name, description, metadata, memory, voice, editor, instructions, tools)``, the
JSON columns as JSON text (``None`` where the code gives a function of the request context)."""


async def upsert_agents(conn: asyncpg.Connection, rows: Sequence[AgentRow]) -> None:
    """Insert or replace the agents' rows."""
    await conn.executemany(
        "INSERT INTO agents (agent_id, name, description, metadata, memory, voice, editor, instructions, tools) "
        "VALUES ($1, $2, $3, $4::text::jsonb, $5::text::jsonb, $6::text::jsonb, $7::text::jsonb, $8, $9::text::jsonb) "
        "ON CONFLICT (agent_id) DO UPDATE SET name = EXCLUDED.name, description = EXCLUDED.description, "
        "metadata = EXCLUDED.metadata, memory = EXCLUDED.memory, voice = EXCLUDED.voice, editor = EXCLUDED.editor, "
        "instructions = EXCLUDED.instructions, tools = EXCLUDED.tools, updated_at = now()", rows)


async def stored_overrides(conn: asyncpg.Connection, agent_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{agent_id: overrides}`` of those of ``agent_ids`` that have editor overrides stored."""
    return {r["agent_id"]: orjson.loads(r["overrides"]) for r in await conn.fetch(
        "SELECT agent_id, overrides::text AS overrides FROM agent_overrides WHERE agent_id = ANY($1::text[])",
        agent_ids)}


async def replace_overrides(conn: asyncpg.Connection, agent_id: str, overrides: Mapping[str, object]) -> None:
    """Replace the agent's stored overrides, keeping who stored them (a new version: an editor
    holding the previous one must reload before saving over it)."""
    await conn.execute("UPDATE agent_overrides SET overrides = $2::text::jsonb, updated_at = now(), "
                       "version = version + 1 WHERE agent_id = $1", agent_id, orjson.dumps(overrides).decode())


_UPSERT = ("INSERT INTO agent_overrides AS o (agent_id, overrides, updated_by, version) "
           "VALUES ($1, $2::text::jsonb, $3, 1) "
           "ON CONFLICT (agent_id) DO UPDATE SET overrides = EXCLUDED.overrides, updated_by = EXCLUDED.updated_by, "
           "updated_at = now(), version = o.version + 1")
_SAVE_NEW = _UPSERT + " WHERE o.version = 0 RETURNING o.version"
_SAVE_OVER = ("UPDATE agent_overrides SET overrides = $2::text::jsonb, updated_by = $3, updated_at = now(), "
              "version = version + 1 WHERE agent_id = $1 AND version = $4 RETURNING version")


async def write_overrides(conn: asyncpg.Connection, agent_id: str, overrides: Mapping[str, object], *,
                          by: str, expected: int | None = None) -> int | None:
    """Store an agent's editor overrides (already stripped), replacing what was stored, when the
    stored version is ``expected`` (0: none stored yet; ``None``: whatever it is); returns the new
    version (1, 2, …), or ``None`` when the stored version is another (nothing written). The check
    and the write are one statement: of two saves built on the same version exactly one writes."""
    text = orjson.dumps(overrides).decode()
    if expected is None:
        version: int | None = await conn.fetchval(_UPSERT + " RETURNING o.version", agent_id, text, by)
    elif expected == 0:  # a concurrent first save conflicts on the key, then fails the version check
        version = await conn.fetchval(_SAVE_NEW, agent_id, text, by)
    else:
        version = await conn.fetchval(_SAVE_OVER, agent_id, text, by, expected)
    return version


async def overrides_version(conn: asyncpg.Connection, agent_id: str) -> int:
    """The version of the agent's stored overrides (0: none stored)."""
    found = await conn.fetchval("SELECT version FROM agent_overrides WHERE agent_id = $1", agent_id)
    return int(found or 0)


async def editable_row(conn: asyncpg.Connection, agent_id: str) -> dict[str, Any] | None:
    """``{agent_id, name, editor, instructions, tools, overrides, updated_at, version}`` of an agent with its
    stored overrides (``editor``, ``tools`` and ``overrides`` decoded JSON or ``None``), or ``None``
    for an agent the cluster does not serve."""
    row = await conn.fetchrow(
        "SELECT a.agent_id, a.name, a.editor::text AS editor, a.instructions, a.tools::text AS tools, "
        "o.overrides::text AS overrides, o.updated_at, coalesce(o.version, 0) AS version FROM agents a "
        "LEFT JOIN agent_overrides o ON o.agent_id = a.agent_id WHERE a.agent_id = $1", agent_id)
    if row is None:
        return None
    return {"agent_id": row["agent_id"], "name": row["name"],
            "editor": orjson.loads(row["editor"]) if row["editor"] else None,
            "instructions": row["instructions"],
            "tools": orjson.loads(row["tools"]) if row["tools"] is not None else None,
            "overrides": orjson.loads(row["overrides"]) if row["overrides"] else None,
            "updated_at": row["updated_at"], "version": row["version"]}
