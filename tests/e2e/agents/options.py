"""Issue 18: agents of the Agent's options as a client sees them — handles (``client.agent(id)``),
the send result's shapes, memory options and dynamic configuration."""

from __future__ import annotations

from threadline.runtime import Agent
from threadline.runtime.memory import Memory

handles = Agent(id="handles", model="openai/threadline-handles", metadata={"team": "support", "tier": 2},
                description="drives the client-side handle tests")
short_memory = Agent(id="short-memory", model="openai/threadline-short-memory", memory=Memory(last_messages=2))
no_history = Agent(id="no-history", model="openai/threadline-no-history", memory={"lastMessages": False})
read_only = Agent(id="read-only-memory", model="openai/threadline-read-only-memory", memory={"read_only": True})
memory_off = Agent(id="memory-off", model="openai/threadline-memory-off", memory=False)

agents = [handles, short_memory, no_history, read_only, memory_off]
