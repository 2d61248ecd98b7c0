"""Anthropic thinking with tools: the signed thinking block of a tool-calling step goes back to the
provider in the next step's request (the fake model server's Anthropic dialect streams a thinking
block with a ``signature_delta``), as Mastra sends it; other providers never get the block."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from types import SimpleNamespace
from typing import Any

import pytest

from threadline._internal.attrdict import wrap
from threadline.runtime.messages import to_core
from threadline.runtime.model import llm
from threadline.runtime.model.provider_options import prepare_messages
from threadline.runtime.step import respond
from threadline.testing import model_script as ms
from threadline.testing.model_server import start_in_thread

pytestmark = pytest.mark.unit

ADD = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]


@pytest.fixture(scope="module")
def server():
    srv = start_in_thread()
    yield srv
    srv.stop()


async def _stream(server: Any, model: str, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Any]:
    outcome = llm.ModelOutcome()
    events = [e async for e in llm.stream_model(model=f"anthropic/{model}", messages=messages, tools=ADD,
                                                 tool_choice=None, model_settings=None, provider_options=None,
                                                 api_base=server.api_base, timeout_s=5.0, outcome=outcome)]
    return events, outcome


async def test_the_signed_thinking_block_goes_back_with_the_tool_call(server) -> None:
    script = ms.ModelScript(server.url)
    model = "threadline-signed-thinking"
    await script.aqueue({"reasoning": "Add them.", "tool_calls": [{"id": "toolu_1", "name": "add",
                                                                    "arguments": {"a": 1, "b": 2}}]}, model=model)
    await script.aqueue(ms.text("Three."), model=model)
    user = {"role": "user", "content": "1+2?"}
    events, outcome = await _stream(server, model, [user])
    end = next(e for e in events if e["type"] == "reasoning-end")
    signature = end["payload"]["providerMetadata"]["anthropic"]["signature"]
    assert signature.startswith("fake-signature-")

    # the step's response message, as the step builds it from what the processors let through
    message = {"role": "assistant", "content": {"parts": []}}
    step = SimpleNamespace(response_message=lambda: message)
    response = respond._response([wrap(e) for e in events], outcome, events, fresh=True)
    respond._add_parts(step, response, False, "anthropic/claude")  # type: ignore[arg-type]  # the one method it uses
    reasoning = message["content"]["parts"][0]  # a message's first step has no step-start, as Mastra's
    assert reasoning["providerMetadata"] == {"anthropic": {"signature": signature}}
    assert reasoning["details"] == [{"type": "text", "text": "Add them.", "signature": signature}]
    invocation = message["content"]["parts"][1]["toolInvocation"]
    invocation.update(state="result", result={"sum": 3})

    history = [user, *to_core([message])]
    assert history[1]["thinking_blocks"] == [{"type": "thinking", "thinking": "Add them.", "signature": signature}]
    await _stream(server, model, history)
    sent = (await script.arequests(model))[-1]["body"]["messages"]
    assert sent[1] == {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Add them.", "signature": signature},
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}}]}


def test_only_anthropic_models_get_thinking_blocks() -> None:
    turn = {"role": "assistant", "content": None, "tool_calls": [],
            "thinking_blocks": [{"type": "thinking", "thinking": "x", "signature": "s"}]}
    assert "thinking_blocks" in prepare_messages([turn], "anthropic/claude-sonnet-4-5")[0]
    assert "thinking_blocks" in prepare_messages([turn], "bedrock/anthropic.claude-3-7-sonnet")[0]
    assert "thinking_blocks" not in prepare_messages([turn], "openai/gpt-4o")[0]
    assert "thinking_blocks" in turn  # the input is not modified


def test_unsigned_reasoning_is_not_sent_back() -> None:
    message = {"role": "assistant", "content": {"parts": [
        {"type": "reasoning", "reasoning": "hm", "details": [{"type": "text", "text": "hm"}]},
        {"type": "text", "text": "ok"}]}}
    assert to_core([message]) == [{"role": "assistant", "content": "ok"}]
