"""The model request as Mastra's: ``tool_choice`` with tools, ``toolChoice: "none"`` without them,
``modelSettings`` under the request's names, tool schemas as Mastra sends a zod object, a tool's
error and a sub-agent's answer as their bare text, the call's ``instructions``, the result's
usage details, and unknown execution options refused (docs/decisions.md#unknown-options)."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from threadline.events.ingress import Generate, IfIdle, Stream
from threadline.events.options import unknown_options
from threadline.events.replies import RunResult
from threadline.events.signals import signal_from_message
from threadline.gateway.api import RunBody
from threadline.runtime.agent import Agent
from threadline.runtime.dynamic import run_system_messages
from threadline.runtime.messages import to_core
from threadline.runtime.model import llm
from threadline.runtime.model.prompt_parts import to_chat, to_mastra
from threadline.runtime.step.tools import run_tool_call
from threadline.runtime.sub_agents import INPUT_SCHEMA
from threadline.runtime.tools import JSON_SCHEMA_DRAFT_07, ToolContext, ToolHooks, create_tool

pytestmark = pytest.mark.unit

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


def _kwargs(**given: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "tools": None, "tool_choice": None,
                            "model_settings": None, "provider_options": None, "api_base": "http://127.0.0.1:9/v1",
                            "timeout_s": 5.0, "response_format": None}
    return llm.request_kwargs("openai/threadline-x", **{**args, **given})


def test_tools_go_with_tool_choice_auto_and_none_sends_neither() -> None:
    assert _kwargs(tools=TOOLS)["tool_choice"] == "auto"
    assert _kwargs(tools=TOOLS, tool_choice="required")["tool_choice"] == "required"
    assert _kwargs(tools=TOOLS, tool_choice={"type": "tool", "toolName": "add"})["tool_choice"] == {
        "type": "function", "function": {"name": "add"}}
    none = _kwargs(tools=TOOLS, tool_choice="none")
    assert "tools" not in none and "tool_choice" not in none
    assert "tool_choice" not in _kwargs()  # no tools: no choice


def test_model_settings_take_the_request_s_names() -> None:
    sent = _kwargs(model_settings={"temperature": 0.2, "maxOutputTokens": 50, "topP": 0.9, "topK": 4,
                                   "presencePenalty": 0.1, "frequencyPenalty": 0.2, "stopSequences": ["END"],
                                   "seed": 7, "maxRetries": 3, "timeout": 9})
    assert {k: sent[k] for k in ("temperature", "max_tokens", "top_p", "top_k", "presence_penalty",
                                 "frequency_penalty", "stop", "seed")} == {
        "temperature": 0.2, "max_tokens": 50, "top_p": 0.9, "top_k": 4, "presence_penalty": 0.1,
        "frequency_penalty": 0.2, "stop": ["END"], "seed": 7}
    assert not {"maxOutputTokens", "topP", "stopSequences", "maxRetries"} & set(sent)
    assert sent["max_retries"] == 0 and sent["timeout"] == 5.0  # the call's own, not the settings'


class _Inner(BaseModel):
    title: str


class _Args(BaseModel):
    a: float
    inner: _Inner | None = None


def test_a_tool_schema_is_sent_as_mastra_sends_a_zod_object() -> None:
    params = create_tool(id="t", description="d", input_schema=_Args, execute=lambda i: 1).parameters()
    assert params["$schema"] == JSON_SCHEMA_DRAFT_07 == "http://json-schema.org/draft-07/schema#"
    assert params["additionalProperties"] is False and params["required"] == ["a"]
    assert params["properties"]["a"] == {"type": "number"}  # no pydantic title
    assert "title" not in params
    inner = params["$defs"]["_Inner"]
    assert inner["properties"] == {"title": {"type": "string"}}  # a property named "title" stays
    assert inner["additionalProperties"] is False and "title" not in inner
    assert create_tool(id="n", description="d", execute=lambda i: 1).parameters() == {
        "$schema": JSON_SCHEMA_DRAFT_07, "type": "object", "properties": {}, "required": [],
        "additionalProperties": False}
    raw = {"type": "object", "properties": {"x": {"type": "string", "title": "X"}}}
    assert create_tool(id="r", description="d", input_schema=raw, execute=lambda i: 1).parameters() is raw
    assert INPUT_SCHEMA["$schema"] == JSON_SCHEMA_DRAFT_07 and INPUT_SCHEMA["additionalProperties"] is False


def _context() -> ToolContext:
    return ToolContext(tool_call_id="c1", run_id="r", thread_id="t", resource_id="res", agent_id="a", step=0,
                       idempotency_key="r:c1", writer=None)


async def test_a_tool_error_is_its_bare_message_and_an_unknown_tool_is_named_as_mastra_names_it() -> None:
    def fail(_: object) -> None:
        raise RuntimeError("tool failed on purpose")

    tools = {"add": create_tool(id="add", description="d", execute=lambda i: 1),
             "fail": create_tool(id="fail", description="d", execute=fail)}
    call: Any = {"toolCallId": "c1", "toolName": "fail", "args": {}}
    assert await run_tool_call(call=call, tools=tools, hooks=ToolHooks(), context=_context(),
                               agent_meta={}) == (None, "tool failed on purpose")
    call = {"toolCallId": "c2", "toolName": "nope", "args": {}}
    _, error = await run_tool_call(call=call, tools=tools, hooks=ToolHooks(), context=_context(), agent_meta={})
    assert error == ('Tool "nope" not found. Available tools: add, fail. Call tools by their exact name only '
                     "\u2014 never add prefixes, namespaces, or colons.")


def _invocation(name: str, **fields: Any) -> dict[str, Any]:
    return {"type": "tool-invocation", "toolInvocation": {"toolCallId": f"id-{name}", "toolName": name,
                                                          "args": {}, **fields}}


def test_the_history_sent_back_carries_null_content_bare_errors_and_a_sub_agent_s_text() -> None:
    answer = {"text": "Helper says hi.", "subAgentRunId": "run_1", "subAgentThreadId": "t.agent-helper.c",
              "subAgentResourceId": "res"}
    message = {"role": "assistant", "content": {"parts": [
        _invocation("fail", state="output-error", errorText="tool failed on purpose"),
        _invocation("agent-helper", state="result", result=answer),
        _invocation("add", state="result", result={"sum": 5})]}}
    core = to_core([message])
    assert core[0]["content"] is None and len(core[0]["tool_calls"]) == 3
    assert [m["content"] for m in core[1:]] == ["tool failed on purpose", "Helper says hi.", '{"sum":5}']


async def test_the_call_s_instructions_replace_the_agent_s() -> None:
    agent = Agent(id="a", name="A", instructions="Agent's own.", model="openai/threadline-x")
    assert await run_system_messages(agent, {}, {}, "From the call.") == [
        {"role": "system", "content": "From the call."}]
    assert await run_system_messages(agent, {}, {"instructions": "Edited."}, "From the call.") == [
        {"role": "system", "content": "From the call."}]
    assert await run_system_messages(agent, {}, {}) == [{"role": "system", "content": "Agent's own."}]


def test_a_result_s_usage_always_has_the_detail_counts() -> None:
    result = RunResult(request_id="q", run_id="r", finish_reason="stop",
                       usage={"inputTokens": 3, "outputTokens": 2, "totalTokens": 5})
    assert result.usage == {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5, "cachedInputTokens": 0,
                            "reasoningTokens": 0}
    kept = RunResult(request_id="q", run_id="r", finish_reason="stop",
                     usage={"inputTokens": 3, "outputTokens": 2, "totalTokens": 5, "cachedInputTokens": 1})
    assert kept.usage["cachedInputTokens"] == 1
    assert RunResult(request_id="q", run_id="r", finish_reason="error").usage == {}


def test_an_unknown_execution_option_is_refused_naming_it() -> None:
    where = {"agent_id": "a", "resource_id": "r", "thread_id": "t", "message": "hi"}
    for model in (Stream, Generate):
        with pytest.raises(ValidationError, match=r"unknown execution option\(s\) 'noSuchOption'.*maxSteps"):
            model(**where, options={"noSuchOption": True, "maxSteps": 2})
        assert model(**where, options={"maxSteps": 2, "max_retries": 1, "instructions": "x", "hooks": "h"}).options
    with pytest.raises(ValidationError, match="'maxStep'"):
        IfIdle(stream_options={"maxStep": 3})
    with pytest.raises(ValidationError, match="'onFinish'"):
        RunBody(message="hi", agent_id="a", options={"onFinish": "x"})
    assert unknown_options({"toolChoice": "auto", "tool_choice": "none", "memory": {}}) == ["memory"]


def test_a_message_object_takes_mastra_s_provider_options_spelling() -> None:
    cache = {"anthropic": {"cacheControl": {"type": "ephemeral"}}}
    for key in ("providerOptions", "provider_options"):
        req = Stream(agent_id="a", resource_id="r", thread_id="t", message={"contents": "hi", key: cache})
        assert signal_from_message(req.message)["providerOptions"] == cache
    assert signal_from_message({"contents": "hi", "providerOptions": cache})["providerOptions"] == cache


def test_the_llm_request_prompt_in_mastra_s_shape_and_back() -> None:
    chat = [{"role": "system", "content": "Be brief.", "providerOptions": {"anthropic": {"cacheControl": {}}}},
            {"role": "user", "content": "2+3?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a":2,"b":3}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"sum":5}'},
            {"role": "tool", "tool_call_id": "c1", "content": "plain words"}]
    mastra = to_mastra(chat)
    assert mastra[1] == {"role": "user", "content": [{"type": "text", "text": "2+3?"}]}
    assert mastra[2] == {"role": "assistant", "content": [
        {"type": "tool-call", "toolCallId": "c1", "toolName": "add", "input": {"a": 2, "b": 3}}]}
    assert mastra[3]["content"] == [{"type": "tool-result", "toolCallId": "c1", "toolName": "add",
                                     "output": {"type": "json", "value": {"sum": 5}}}]
    assert mastra[4]["content"][0]["output"] == {"type": "text", "value": "plain words"}
    back = to_chat(mastra)
    assert back[2:] == [{"role": "assistant", "content": None, "tool_calls": chat[2]["tool_calls"]},
                        {"role": "tool", "tool_call_id": "c1", "content": '{"sum":5}'}, chat[4]]
    assert to_chat(chat) == chat and all(a is b for a, b in zip(to_chat(chat), chat, strict=True))
    # a processor written for Mastra appends its note in Mastra's shape: the step sends it as chat
    note = {"role": "user", "content": [{"type": "text", "text": "note"}]}
    assert to_chat([*mastra[2:4], note])[-1] == note
