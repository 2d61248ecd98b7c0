"""Editor overrides in PostgreSQL (migration 0021, decision 68): ingress publishes what each
agent's code lets the editor change, and strips from stored overrides what the code now locks."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import orjson

from threadline.flows.agents import publish_agents, read_editable
from threadline.runtime import Agent, create_tool
from threadline.store.agents import overrides_version, write_overrides

ADD = create_tool(id="add", description="add two numbers", execute=lambda i: i)
EDITS = {"instructions": "edited", "tools": {"add": {"description": "sum"}}}


async def read_overrides(conn: asyncpg.Connection, agent_id: str) -> dict[str, Any] | None:
    """The agent's stored overrides row as is (``None``: no row)."""
    raw = await conn.fetchval("SELECT overrides::text FROM agent_overrides WHERE agent_id = $1", agent_id)
    return None if raw is None else dict(orjson.loads(raw))


async def test_publishing_a_locked_agent_strips_its_stored_overrides(cluster) -> None:
    agent_id = f"ed-{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(cluster.dsn)
    try:
        await publish_agents(conn, [Agent(id=agent_id, instructions="code prompt", tools=[ADD])])
        await write_overrides(conn, agent_id, EDITS, by="api_key")
        shown = await read_editable(conn, agent_id)
        assert shown is not None and shown["overrides"] == EDITS
        assert shown["code"] == {"instructions": "code prompt", "tools": {"add": "add two numbers"}}
        assert shown["editor"] == {"instructions": True, "tools": {"description": True}}
        # a deploy locks the instructions: the stored instructions override goes, the description stays
        await publish_agents(conn, [Agent(id=agent_id, instructions="code prompt", tools=[ADD],
                                          editor={"instructions": False})])
        assert await read_overrides(conn, agent_id) == {"tools": {"add": {"description": "sum"}}}
        await publish_agents(conn, [Agent(id=agent_id, instructions=lambda ctx: "dynamic", editor=False)])
        assert await read_overrides(conn, agent_id) == {}
        shown = await read_editable(conn, agent_id)
        assert shown is not None and shown["code"] == {"instructions": None, "tools": {}}
        assert shown["editor"] == {"instructions": False, "tools": {"description": False}}
        assert await read_editable(conn, f"{agent_id}-missing") is None
    finally:
        await conn.close()


async def test_d15_first_saves_race_and_exactly_one_writes(cluster) -> None:
    """D15 at the store: 20 concurrent first saves (version 0, no row yet) and then 20 on version
    1 — in each round one writes and the others see another version (nothing written)."""
    agent_id = f"ed-{uuid.uuid4().hex[:8]}"
    conns = [await asyncpg.connect(cluster.dsn) for _ in range(20)]
    try:
        for expected in (0, 1):
            results = await asyncio.gather(*(
                write_overrides(c, agent_id, {"instructions": f"save {i}"}, by="api_key", expected=expected)
                for i, c in enumerate(conns)))
            assert sorted(results, key=lambda v: v or 0) == [None] * 19 + [expected + 1]
        assert await overrides_version(conns[0], agent_id) == 2
        assert await write_overrides(conns[0], agent_id, {}, by="api_key", expected=5) is None
        assert await write_overrides(conns[0], agent_id, {}, by="api_key") == 3  # unconditional
        assert await overrides_version(conns[0], f"ed-{uuid.uuid4().hex[:8]}") == 0
    finally:
        await asyncio.gather(*(c.close() for c in conns))


async def test_d15_a_start_up_that_strips_overrides_moves_their_version(cluster) -> None:
    """An editor holding the version from before a deploy locked a field must reload: the strip
    at start-up is a new version; a start-up that strips nothing keeps it."""
    agent_id = f"ed-{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(cluster.dsn)
    try:
        await publish_agents(conn, [Agent(id=agent_id, instructions="code prompt", tools=[ADD])])
        assert await write_overrides(conn, agent_id, EDITS, by="api_key", expected=0) == 1
        await publish_agents(conn, [Agent(id=agent_id, instructions="code prompt", tools=[ADD])])
        assert await overrides_version(conn, agent_id) == 1
        await publish_agents(conn, [Agent(id=agent_id, instructions="code prompt", tools=[ADD],
                                          editor={"instructions": False})])
        shown = await read_editable(conn, agent_id)
        assert shown is not None and shown["version"] == 2
        assert shown["overrides"] == {"tools": {"add": {"description": "sum"}}}
        assert await write_overrides(conn, agent_id, EDITS, by="api_key", expected=1) is None
    finally:
        await conn.close()
