"""The message and state types (runtime/message_types.py, ``StoredState``): what a real step
builds has the shape its TypedDict declares — the stored messages, the model's prompt and tools,
the step summaries, the recorded model output and the stored run state."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any, get_origin, get_type_hints

import pytest

from tests.unit.test_chunk_types import _conforms
from threadline.events.messages import make_message
from threadline.runtime import Agent, create_tool
from threadline.runtime.message_types import (
    CoreMessage,
    DBMessage,
    MessagePart,
    RecordedOutput,
    StepSummary,
    ToolOutcome,
    ToolSpec,
)
from threadline.runtime.messages import MessageList, to_core
from threadline.runtime.model.llm_stream import StreamWatch, watch_raw
from threadline.runtime.step.loop import StepLoop
from threadline.runtime.step.ports import Continue, Finish, RunState, StepInputs, StoredState
from threadline.testing import MemorySink, MemoryStepStore, ScriptedModel, step_run, text_delta, tool_call, user_signal

pytestmark = pytest.mark.unit


def _keys(td: Any) -> tuple[set[str], set[str]]:
    """``(required, optional)`` keys of ``td`` read from its hints (a TypedDict of a module with
    ``from __future__ import annotations`` lists ``NotRequired`` keys as required at run time)."""
    hints = get_type_hints(td, include_extras=True)
    optional = {k for k, tp in hints.items() if get_origin(tp) is typing.NotRequired} | set(td.__optional_keys__)
    return set(hints) - optional, optional


def _has_keys(value: Mapping[str, object], td: Any) -> None:
    required, optional = _keys(td)
    assert required <= value.keys(), f"{td.__name__}: missing {required - value.keys()}"
    assert value.keys() <= required | optional, f"{td.__name__}: unexpected {value.keys() - required - optional}"


def _message(msg: Mapping[str, Any]) -> None:
    _conforms(dict(msg), DBMessage, "message")
    for i, part in enumerate(msg["content"]["parts"]):
        _conforms(dict(part), MessagePart, f"message.parts[{i}]")


def test_a_stored_message_with_every_part_kind_is_a_db_message() -> None:
    msg = make_message("assistant", [
        {"type": "step-start"}, {"type": "reasoning", "reasoning": "hm", "details": [{"type": "text", "text": "hm"}]},
        {"type": "text", "text": "hi"}, {"type": "file", "data": "aGk=", "mimeType": "text/plain"},
        {"type": "tool-invocation", "toolInvocation": {"state": "result", "toolCallId": "c1", "toolName": "t",
                                                       "args": {"a": 1}, "result": 2}},
        {"type": "data-progress", "data": {"pct": 50}}], thread_id="th", resource_id="res", metadata={"k": "v"})
    _message(msg)
    with pytest.raises(AssertionError):  # the check can fail: a part of no known shape
        _message(make_message("user", [{"type": "text"}]))


def test_to_core_answers_core_messages() -> None:
    ml = MessageList()
    ml.add("now")
    ml.add(make_message("assistant", [
        {"type": "step-start"}, {"type": "text", "text": "looking"},
        {"type": "tool-invocation", "toolInvocation": {"state": "result", "toolCallId": "c1", "toolName": "t",
                                                       "args": {"a": 1}, "result": {"ok": True}}},
        {"type": "tool-invocation", "toolInvocation": {"state": "output-error", "toolCallId": "c2",
                                                       "toolName": "t", "args": {}, "errorText": "bad"}}]), "response")
    core = to_core(ml.get.all.db())
    assert [m["role"] for m in core] == ["user", "assistant", "tool", "tool"]
    for m in core:
        _conforms(m, CoreMessage, "core")
    for m in ml.get.all.ui():
        assert {"id", "role", "parts"} <= m.keys()


async def test_a_two_step_run_builds_the_declared_shapes() -> None:
    add = create_tool(id="add", description="adds", execute=lambda args: args["a"] + 1)
    agent = Agent(id="a", instructions="be brief", tools=[add])
    loop = StepLoop(default_model="openai/threadline-test", model_api_base=None, model_timeout_s=5,
                    model=(model := ScriptedModel([tool_call("add", {"a": 1}, "c1")], [text_delta("2")])))
    sink, store = MemorySink("run-1", 0), MemoryStepStore()
    first = await loop.run(step_run(agent_id="a"), agent,
                           StepInputs(attempt=1, seq_base=0, restarted=False, signals=[user_signal("hi")]), sink, store)
    assert first == Continue("tool-calls")
    saved = store.saved[0]
    second = await loop.run(step_run(agent_id="a", step=1, state=RunState.carried(saved.state)), agent,
                            StepInputs(attempt=1, seq_base=sink.seq, restarted=False), MemorySink("run-1", 1), store)
    assert second == Finish("stop")

    for spec in model.calls[0]["tools"]:
        _conforms(spec, ToolSpec, "tool")
    for prompt in model.prompts:
        for m in prompt:
            _conforms(m, CoreMessage, "prompt")
    assert [m["role"] for m in model.prompts[1]][-3:] == ["user", "assistant", "tool"]
    [output] = store.outputs
    _has_keys(output, RecordedOutput)
    for record in store.saved:
        _has_keys(record.state, StoredState)
        for summary in record.state["steps"]:
            _has_keys(summary, StepSummary)
            assert set(get_type_hints(StepSummary)) - {"object"} <= summary.keys()  # only object is optional
            for outcome in summary["toolResults"]:
                _conforms(outcome, ToolOutcome, "toolResults")
        for msg, _source in record.entries:
            _message(msg)
    assert store.saved[-1].state["steps"][0]["toolResults"] == [
        {"toolCallId": "c1", "toolName": "add", "result": 2}]
    assert saved.state["version"] == 1


def test_a_stream_watch_without_a_raw_stream_trusts_the_wrapper() -> None:
    class Response:  # litellm's wrapper with no raw stream to watch
        completion_stream = None

    seen = watch_raw(Response())
    assert seen == {"usage": True, "events": 1, "clean_end": True, "last_usage": None, "done": True}  # [DONE] trusted too (§180)
    _has_keys(seen, StreamWatch)
