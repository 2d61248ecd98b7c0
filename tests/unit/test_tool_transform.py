"""Tool payload transforms (decision 72): precedence, fail-closed, suppressed deltas, copies."""

from __future__ import annotations

import pytest

from threadline.errors import ConfigurationError
from threadline.runtime import Agent, create_tool
from threadline.runtime.transform import SUPPRESS, display_chunk, transcript_entries


def _boom(ctx):
    raise RuntimeError("no")


tool = create_tool(id="t", description="d", execute=lambda a: a,
                   transform={"display": {"input": lambda ctx: {"k": ctx.input["k"]}, "output": _boom}})
plain = create_tool(id="p", description="d", execute=lambda a: a)
agent = Agent(id="a", tools=[tool, plain], transform={"transform_tool_payload": lambda ctx: None})


async def test_the_tool_rule_wins_and_failures_fail_closed():
    tools = agent.tools
    result = {"type": "tool-result", "payload": {"toolCallId": "c", "toolName": "t", "args": {"k": 1, "s": 2},
                                                 "result": {"secret": 1}}}
    shown = await display_chunk(result, tools, agent.transform)
    assert shown["payload"]["args"] == {"k": 1}
    assert shown["payload"]["result"] == {"message": "Tool output-available payload unavailable"}
    assert result["payload"]["args"] == {"k": 1, "s": 2}  # the original is untouched
    policy_only = await display_chunk({**result, "payload": {**result["payload"], "toolName": "p"}}, tools,
                                      agent.transform)
    assert policy_only["payload"]["args"] == {"message": "Tool input-available payload unavailable"}
    delta = {"type": "tool-call-delta", "payload": {"toolCallId": "c", "toolName": "t", "argsTextDelta": '{"s'}}
    assert await display_chunk(delta, tools, agent.transform) is SUPPRESS
    text = {"type": "text-delta", "payload": {"text": "hi"}}
    assert await display_chunk(text, tools, agent.transform) is text


async def test_the_transcript_gets_copies():
    msg = {"id": "m", "role": "assistant", "content": {"parts": [{"type": "tool-invocation", "toolInvocation": {
        "toolCallId": "c", "toolName": "p", "args": {"s": 1}, "state": "result", "result": {"s": 2}}}]}}
    (stored, source), = await transcript_entries([(msg, "response")], agent.tools, agent.transform)
    inv = stored["content"]["parts"][0]["toolInvocation"]
    assert inv["args"] == {"message": "Tool input-available payload unavailable"} and source == "response"
    assert msg["content"]["parts"][0]["toolInvocation"]["args"] == {"s": 1}


def test_bad_rules_are_refused():
    with pytest.raises(ConfigurationError):
        create_tool(id="x", description="d", execute=len, transform={"screen": {"input": len}})
    with pytest.raises(ConfigurationError):
        create_tool(id="x", description="d", execute=len, transform={"display": {"inputs": len}})
    with pytest.raises(ConfigurationError):
        Agent(id="x", transform={"transform_tool_payload": len, "targets": ["screen"]})
    with pytest.raises(ConfigurationError):
        Agent(id="x", transform={"targets": ["display"]})
