"""A model call sent by ``llm_direct`` reaches the provider as litellm would have sent it: the same
JSON body and the same authorization, for every argument the path takes; a call with an argument
it does not map, a litellm callback, or a client setting from the environment goes through
litellm (``prepare`` answers ``None``)."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from typing import Any

import litellm
import pytest

from threadline.runtime.model import llm, llm_direct
from threadline.testing import model_script as ms
from threadline.testing.model_server import start_in_thread

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Find a record.",
                                           "parameters": {"type": "object", "properties": {"id": {"type": "string"}},
                                                          "required": ["id"]}}},
         {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}]
HISTORY = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\"id\": \"C-1\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"name\": \"Ada\"}"},
    {"role": "user", "content": "And now?"},
]
SCHEMA = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}}}

CALLS: dict[str, dict[str, Any]] = {
    "plain": {},
    # a custom base keeps Anthropic's cache marks (an OpenAI-compatible proxy may read them) and drops
    # a pattern Python's re cannot compile from a tool's parameters: litellm decides both by the endpoint
    "cache-marked": {"messages": [{"role": "system", "content": [{"type": "text", "text": "policy",
                                                                  "cache_control": {"type": "ephemeral"}}]},
                                  {"role": "user", "content": "hi"}], "tools": TOOLS},
    "tool-pattern": {"tools": [{"type": "function", "function": {"name": "named", "parameters": {
        "type": "object", "properties": {"name": {"type": "string", "pattern": "^\\p{L}+$"}}}}}]},
    "history-tools-auto": {"messages": HISTORY, "tools": TOOLS, "tool_choice": "auto"},
    "tool-choice-named": {"tools": TOOLS, "tool_choice": {"type": "tool", "toolName": "lookup"}},
    "tool-choice-required": {"tools": TOOLS, "tool_choice": "required"},
    "tool-choice-none": {"tools": TOOLS, "tool_choice": "none"},
    "settings": {"model_settings": {"temperature": 0.2, "maxTokens": 64, "topP": 0.9, "stop": ["END"], "seed": 7,
                                    "presence_penalty": 0.1, "frequency_penalty": 0.2}},
    "structured": {"response_format": SCHEMA},
    "user-and-parallel": {"tools": TOOLS, "model_settings": {"user": "u-1", "parallel_tool_calls": False}},
}


@pytest.fixture(scope="module")
def server():
    srv = start_in_thread()
    yield srv
    srv.stop()


async def _sent(server, name: str, direct: bool, monkeypatch: pytest.MonkeyPatch,
                real: str | None = None) -> tuple[dict[str, Any], str]:
    """The body and authorization the fake received for call ``name``; ``real``: an OpenAI model
    name the call is routed to (at the fake), so litellm maps the parameters for that model."""
    call = CALLS[name]
    model = real or f"threadline-request-{name}-{direct}"
    if real is not None:
        monkeypatch.setattr(llm, "call_kwargs", lambda *a, **k: {
            "model": f"openai/{real}", "timeout": 5.0, "num_retries": 0, "max_retries": 0,
            "api_base": server.api_base, "api_key": "sk-test"})
    calls: list[bool] = []
    prepare = llm_direct.prepare

    def watched(kwargs: dict[str, Any]) -> Any:
        request = prepare(kwargs) if direct else None
        calls.append(request is not None)
        return request

    monkeypatch.setattr(llm_direct, "prepare", watched)
    script = ms.ModelScript(server.url)
    await script.aqueue(ms.text("ok"), model=model)
    async for _ in llm.stream_model(model=f"openai/{model}", messages=call.get("messages", [{"role": "user", "content": "hi"}]),
                                    tools=call.get("tools"), tool_choice=call.get("tool_choice"),
                                    model_settings=call.get("model_settings"), provider_options=None,
                                    api_base=server.api_base, timeout_s=5.0, outcome=llm.ModelOutcome(),
                                    response_format=call.get("response_format")):
        pass
    monkeypatch.setattr(llm_direct, "prepare", prepare)
    assert calls == [direct]
    entry = (await script.arequests(model))[-1]
    body = entry["body"]
    body.pop("model")  # the two calls name two models of the fake
    auth = {k.lower(): v for k, v in entry["headers"].items()}.get("authorization", "")
    return body, auth


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_the_direct_call_sends_what_litellm_sends(server, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    by_litellm = await _sent(server, name, False, monkeypatch)
    direct = await _sent(server, name, True, monkeypatch)
    assert (_without_null_contents(direct[0]), direct[1]) == by_litellm
    assert direct[1] != ""  # an authorization header went (the fake journals it redacted)
    if name == "history-tools-auto":  # the one difference: the null content litellm drops is sent, as Mastra does
        assert direct[0]["messages"][2] == {**HISTORY[2], "content": None}
        assert "content" not in by_litellm[0]["messages"][2]


def _without_null_contents(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with the ``content: null`` of assistant tool-call messages removed, as litellm sends them."""
    messages = [{k: v for k, v in m.items() if not (k == "content" and v is None and m.get("tool_calls"))}
                for m in body.get("messages", [])]
    return {**body, "messages": messages}


@pytest.mark.parametrize("real", ["gpt-4o-mini", "o3-mini", "gpt-5-mini"])
@pytest.mark.parametrize("name", ["settings", "user-and-parallel"])
async def test_the_model_specific_mapping_is_litellm_s(server, name: str, real: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """o-series and gpt-5 models get other parameters (``max_completion_tokens``, no
    ``temperature``…): the direct call maps them with litellm's own rules."""
    original = llm.call_kwargs
    by_litellm = await _sent(server, name, False, monkeypatch, real=real)
    direct = await _sent(server, name, True, monkeypatch, real=real)
    monkeypatch.setattr(llm, "call_kwargs", original)
    assert direct == by_litellm


def _kwargs(**extra: Any) -> dict[str, Any]:
    kwargs = llm.call_kwargs("openai/threadline-x", api_base="http://127.0.0.1:9/v1", timeout_s=5.0)
    kwargs.update(messages=[{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True})
    return {**kwargs, **extra}


def test_what_is_sent_directly_and_what_through_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in llm_direct._ENV_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    request = llm_direct.prepare(_kwargs())
    assert request is not None and request.url == "http://127.0.0.1:9/v1/chat/completions"
    assert request.timeout_s == 5.0 and request.headers["Authorization"] == "Bearer threadline-local"
    assert llm_direct.prepare(_kwargs(reasoning_effort="low")) is None  # an argument the path does not map
    assert llm_direct.prepare(_kwargs(model="anthropic/claude-x")) is None  # another provider
    assert llm_direct.prepare(_kwargs(api_key=None)) is None or os.environ.get("OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-1")  # the openai client would send it
    assert llm_direct.prepare(_kwargs()) is None
    monkeypatch.delenv("OPENAI_ORG_ID")
    monkeypatch.setattr(litellm, "aclient_session", object())  # the user's own HTTP client: litellm's to use
    assert llm_direct.prepare(_kwargs()) is None
    monkeypatch.setattr(litellm, "aclient_session", None)
    assert llm_direct.prepare(_kwargs()) is not None
    monkeypatch.setattr(litellm, "callbacks", [*litellm.callbacks, "langfuse"])  # callbacks see every call
    assert llm_direct.prepare(_kwargs()) is None


def test_the_setting_turns_the_path_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from threadline.config import Settings

    monkeypatch.setattr(llm_direct, "get_settings", lambda: Settings(model_direct=False))
    assert llm_direct.prepare(_kwargs()) is None
