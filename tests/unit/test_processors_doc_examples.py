"""docs/processors.md's examples, extracted from the page and run as written: every ```python
block executes, each class of "Examples, one per method" implements the method its comment names,
and each behaves as the page says through the processor runner."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from threadline._internal.attrdict import wrap
from threadline.runtime import Agent, MessageList, Processor, ProcessorRunner, TripWire, make_message
from threadline.runtime.model.provider_options import request_options
from threadline.runtime.processor import implements
from threadline.runtime.step.loop import StepLoop
from threadline.runtime.step.ports import StepInputs
from threadline.testing import MemorySink, MemoryStepStore, ScriptedModel, step_run, text_delta, user_signal

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[2] / "docs" / "processors.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), re.S | re.M)


def _examples() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec("from threadline.runtime import Agent, Processor\n" + "\n".join(BLOCKS), namespace)
    return namespace


def _runner(*, input: tuple[Any, ...] = (), output: tuple[Any, ...] = (), error: tuple[Any, ...] = (),
            retry_count: int = 0) -> ProcessorRunner:
    return ProcessorRunner(input_processors=list(input), output_processors=list(output),
                           error_processors=list(error), states={}, retry_count=retry_count)


def test_every_example_runs_and_implements_the_method_its_comment_names() -> None:
    ex = _examples()
    named = re.findall(r"^class (\w+)\(Processor\):\s+# (process_\w+)", "\n".join(BLOCKS), re.M)
    assert len(named) == 9  # "one per method"
    for cls, method in named:
        assert issubclass(ex[cls], Processor) and implements(ex[cls], method), (cls, method)
    assert ex["agent"].id == "support-agent"


async def test_the_input_and_request_examples() -> None:
    ex = _examples()
    ml = MessageList()
    ml.add("Hello THERE")
    await _runner(input=(ex["LowercaseProcessor"](),)).process_input(ml)
    assert ml.get.all.db()[0].content.parts[0].text == "hello there"
    dynamic = _runner(input=(ex["DynamicModelProcessor"](),))
    assert (await dynamic.process_input_step(MessageList(), {"model": "x"}, step_number=0, steps=[]))["model"] \
        == "openai/gpt-5-mini"
    prompt = [{"role": "reasoning", "content": "hm"}, {"role": "user", "content": "hi"}]
    assert ex["StripReasoning"]().process_llm_request(prompt=prompt) == {"prompt": [prompt[1]]}


async def test_the_output_examples() -> None:
    ex = _examples()
    stream = _runner(output=(ex["ContentFilter"](["secret"]), ex["WordCounter"]()))
    for text in ("two words", "three more words"):
        await stream.process_output_stream(wrap({"type": "text-delta", "payload": {"id": "t0", "text": text}}))
    assert stream.states["word-counter"]["words"] == 5
    with pytest.raises(TripWire, match="Blocked content detected in output"):
        await stream.process_output_stream(wrap({"type": "text-delta", "payload": {"id": "t0", "text": "a secret"}}))
    args = {"step_number": 0, "steps": [], "finish_reason": "stop", "tool_calls": None, "usage": None}
    with pytest.raises(TripWire) as info:
        await _runner(output=(ex["QualityGuardrail"](),)).process_output_step(MessageList(), text="short", **args)
    assert info.value.retry is True
    with pytest.raises(TripWire) as info:
        await _runner(output=(ex["QualityGuardrail"](),), retry_count=3).process_output_step(
            MessageList(), text="short", **args)
    assert info.value.retry is False
    await _runner(output=(ex["QualityGuardrail"](),)).process_output_step(
        MessageList(), text="a long enough answer, surely", **args)


async def test_the_tool_result_and_error_examples() -> None:
    ex = _examples()
    ml = MessageList()
    ml.add(make_message("assistant", [{"type": "tool-invocation", "toolInvocation": {
        "state": "call", "toolCallId": "c1", "toolName": "lookup_customer", "args": {"id": 1}}}], id="r"), "response")
    await _runner(output=(ex["RedactToolResult"](),)).process_tool_result(
        ml, step_number=0, steps=[], tool_name="lookup_customer", tool_call_id="c1", args={"id": 1},
        result={"name": "Ann", "ssn": "123"})
    assert ml.get_by_id("r").content.parts[0].toolInvocation.result == {"name": "Ann", "ssn": "[REDACTED]"}
    long = MessageList()
    for i in range(6):
        long.add(f"m{i}")
    error = wrap({"kind": "context_length_exceeded", "message": "too long"})
    assert await _runner(error=(ex["ErrorRecoveryProcessor"](),)).process_api_error(
        long, error=error, step_number=0, steps=[])
    assert len(long) == 4


async def test_the_response_and_result_examples() -> None:
    ex = _examples()
    logger = _runner(input=(ex["ResponseLogger"](),))
    await logger.process_llm_response([{"type": "text-delta"}, {"type": "finish"}], model="m", step_number=0,
                                      steps=[], from_cache=False)
    assert logger.states["response-logger"]["last_chunk_count"] == 2
    written: list[Any] = []

    class Writer:
        async def custom(self, chunk: Any) -> None:
            written.append(chunk)

    summary = _runner(output=(ex["Summary"](),))
    summary.writer = Writer()
    await summary.process_output_result(MessageList(), result={"text": "hi", "finishReason": "stop"})
    assert written == [{"type": "data-summary", "data": {"finish": "stop"}}]


async def test_a_step_level_reasoning_effort_reaches_the_request_body() -> None:
    """The documents' ``providerOptions.openai.reasoningEffort``, set by ``process_input_step``:
    the step's model call gets it, and the request body carries ``reasoning_effort``."""
    class Effort(Processor):
        id = "effort"

        async def process_input_step(self, **_: Any) -> Any:
            return {"providerOptions": {"openai": {"reasoningEffort": "high"}}}

    model = ScriptedModel([text_delta("ok")])
    loop = StepLoop(default_model="openai/gpt-5-mini", model_api_base=None, model_timeout_s=5, model=model)
    await loop.run(step_run(), Agent(id="a", input_processors=[Effort()]),
                   StepInputs(attempt=1, seq_base=0, restarted=False, signals=[user_signal("hi")]),
                   MemorySink("run-1", 0), MemoryStepStore())
    [call] = model.calls
    assert call["provider_options"] == {"openai": {"reasoningEffort": "high"}}
    assert request_options(call["provider_options"], "openai/gpt-5-mini")["reasoning_effort"] == "high"
