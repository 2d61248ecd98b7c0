"""Agents driven over HTTP (docs/gateway.md): the gateway's tests and the Studio browser test."""

from __future__ import annotations

from pydantic import BaseModel

from threadline.runtime import Agent, create_tool

gateway = Agent(id="gateway", model="openai/threadline-gateway")
studio = Agent(id="studio", model="openai/threadline-studio", instructions="You are Studio's test agent.")


class AddInput(BaseModel):
    a: int
    b: int


def _add() -> object:
    return create_tool(id="add", description="add two numbers", input_schema=AddInput, execute=lambda i: i.a + i.b)


# the Python client over HTTP (tests/e2e/test_gateway_client.py): a turn with a tool call
gateway_tools = Agent(id="gateway-tools", model="openai/threadline-gateway-tools", default_options={"max_steps": 3},
                      instructions="You add numbers.", tools=[_add()])

# editor overrides (tests/e2e/test_gateway_editor.py): open, locked, instructions locked
editor_open = Agent(id="editor-open", model="openai/threadline-editor-open", instructions="You are the code's prompt.",
                    tools=[_add()], default_options={"max_steps": 3})
editor_locked = Agent(id="editor-locked", model="openai/threadline-editor-locked", instructions="Locked prompt.",
                      tools=[_add()], editor=False)
editor_partial = Agent(id="editor-partial", model="openai/threadline-editor-partial", instructions="Partial prompt.",
                       tools=[_add()], editor={"instructions": False})



class LookupInput(BaseModel):
    order: str


def _support_tool(tool_id: str, description: str) -> object:
    return create_tool(id=tool_id, description=description, input_schema=LookupInput, execute=lambda i: i.order)


# D15 (tests/e2e/test_d15_editor_versions.py): two editors saving over each other's changes
d15_support = Agent(id="d15-support", model="openai/threadline-d15-support", instructions="You are support.",
                    tools=[_support_tool("lookup", "look an order up"), _support_tool("refund", "refund an order")])

agents = [gateway, studio, gateway_tools, editor_open, editor_locked, editor_partial, d15_support]
