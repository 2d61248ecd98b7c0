"""Agents of the Agent's options as a client sees them — handles (``client.agent(id)``),
the send result's shapes, memory options and dynamic configuration."""

from __future__ import annotations

import asyncio

from threadline.runtime import Agent, tool
from threadline.runtime.memory import Memory

from .processing import Shout

handles = Agent(id="handles", model="openai/threadline-handles", metadata={"team": "support", "tier": 2},
                description="drives the client-side handle tests")
short_memory = Agent(id="short-memory", model="openai/threadline-short-memory", memory=Memory(last_messages=2))
no_history = Agent(id="no-history", model="openai/threadline-no-history", memory={"lastMessages": False})
read_only = Agent(id="read-only-memory", model="openai/threadline-read-only-memory", memory={"read_only": True})
memory_off = Agent(id="memory-off", model="openai/threadline-memory-off", memory=False)

agents = [handles, short_memory, no_history, read_only, memory_off]


# --- dynamic configuration: every option a (plain or async) function of the request context ---
async def _instructions(request_context):
    await asyncio.sleep(0)  # async instructions
    return f"You serve the {request_context['tier']} tier."


def _model(request_context):
    return f"openai/threadline-dynamic-{request_context['tier']}"


async def _tools(request_context):
    return [lookup] if request_context["tier"] == "pro" else []


async def _default_options(request_context):
    return {"maxSteps": 1} if request_context["tier"] == "pro" else {"maxSteps": 3}


async def _memory(request_context):
    return {"lastMessages": 1 if request_context["tier"] == "pro" else 10}


async def _metadata(request_context):
    return {"tier": request_context["tier"]}


async def _output_processors(request_context):
    return [Shout()] if request_context["tier"] == "pro" else []


@tool(description="Look something up.")
def lookup() -> dict:
    return {"found": True}


def _show_metadata(ctx):
    """The hook answers for the tool with the agent's metadata of the run."""
    return {"proceed": False, "output": {"meta": ctx.metadata["agent_metadata"]}}


dynamic = Agent(id="dynamic", instructions=_instructions, model=_model, tools=_tools, default_options=_default_options,
                memory=_memory, metadata=_metadata, output_processors=_output_processors,
                hooks={"before_tool_call": _show_metadata},
                request_context_schema={"type": "object", "required": ["tier"],
                                        "properties": {"tier": {"enum": ["free", "pro"]}}})

agents.append(dynamic)
