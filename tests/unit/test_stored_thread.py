"""What a run stores in the thread, as @mastra/core 1.71 stores it (decision 170), on the step
loop's in-memory ports: a failed model call's assistant message (the text streamed, an ``error``
part), a ``process_output_step`` abort's rejected answer, where a processor's ``data-*`` part
stands among the step's parts, ``metadata.structuredOutput`` and ``metadata.mastra.responseBoundary``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from threadline.errors import ModelCallError
from threadline.runtime import Agent, Processor
from threadline.runtime.model.model_outcome import ModelOutcome
from threadline.runtime.step.loop import StepLoop
from threadline.runtime.step.ports import Fail, RunState, Signal, StepInputs, StepRun, Trip
from threadline.testing import MemorySink, MemoryStepStore, ScriptedModel, text_delta

pytestmark = pytest.mark.unit

SIGNAL = Signal("sig-1", {"id": "sig-1", "type": "user", "tagName": "user", "contents": "hi",
                          "attributes": {}, "metadata": {}, "createdAt": "2026-01-01T00:00:00Z"})


def _run(step: int = 0, state: RunState | None = None) -> StepRun:
    return StepRun(run_id="run-1", resource_id="res", thread_id="th", agent_id="a", epoch=1, step=step, next_seq=0,
                   options={}, state=state or RunState())


def _loop(model: Any) -> StepLoop:
    return StepLoop(default_model="openai/threadline-test", model_api_base=None, model_timeout_s=5, model=model)


async def _stored(model: Any, agent: Agent, *, run: StepRun | None = None,
                  signals: list[Signal] | None = None) -> tuple[Any, list[dict[str, Any]]]:
    """Run one step; returns its outcome and the thread's messages it saved (role and content)."""
    store = MemoryStepStore()
    outcome = await _loop(model).run(run or _run(), agent, StepInputs(attempt=1, seq_base=0, restarted=False,
                                                                      signals=[SIGNAL] if signals is None else signals),
                                     MemorySink("run-1", 0), store)
    [saved] = store.saved
    return outcome, [{"role": m["role"], "content": m["content"]} for m, source in saved.entries
                     if source in ("input", "response")]


def _types(msg: dict[str, Any]) -> list[str]:
    return [p["type"] for p in msg["content"]["parts"]]


async def test_a_failed_model_call_stores_the_input_and_an_error_part() -> None:
    error = ModelCallError("bad request", kind="bad_request", status_code=400)
    error.provider = {"name": "AI_APICallError"}
    outcome, thread = await _stored(ScriptedModel(error), Agent(id="a"))
    assert isinstance(outcome, Fail)
    assert [m["role"] for m in thread] == ["signal", "assistant"]  # a sent user signal: role signal, as Mastra's
    assert thread[1]["content"]["parts"][0] == {"type": "error", "error": {"name": "AI_APICallError",
                                                                           "message": "bad request"},
                                                "createdAt": thread[1]["content"]["parts"][0]["createdAt"]}
    assert "content" not in thread[1]["content"] and "metadata" not in thread[1]["content"]


class _FailsMidStream:
    """A model function that streams ``Hel``, ``lo``, then fails (an error event in the stream)."""

    def __call__(self, *, outcome: ModelOutcome, **_: Any) -> AsyncIterator[dict[str, Any]]:
        return self._play(outcome)

    async def _play(self, outcome: ModelOutcome) -> AsyncIterator[dict[str, Any]]:
        for text in ("Hel", "lo"):
            outcome.add_text(text)
            yield text_delta(text)
        raise ModelCallError("The server had an error", kind="server_error")


async def test_a_call_failing_mid_stream_stores_what_streamed_then_the_error() -> None:
    outcome, thread = await _stored(_FailsMidStream(), Agent(id="a"))
    assert isinstance(outcome, Fail)
    answer = thread[1]["content"]
    assert _types(thread[1]) == ["text", "error"] and answer["parts"][0]["text"] == "Hello"
    assert answer["parts"][1]["error"] == {"name": "Error", "message": "The server had an error"}
    assert answer["content"] == "Hello" and answer["metadata"]["modelId"] == "threadline-test"


class _Guard(Processor):
    """``process_output_step`` aborts a step whose text holds ``forbidden``."""

    id = "guard"

    async def process_output_step(self, *, text: str, abort: Any, **_: Any) -> None:
        if "forbidden" in text:
            abort("step mentions forbidden")


class _StreamGuard(Processor):
    """``process_output_stream`` aborts on a ``text-delta`` holding ``forbidden``."""

    id = "stream-guard"

    async def process_output_stream(self, *, part: Any, abort: Any, **_: Any) -> Any:
        if part["type"] == "text-delta" and "forbidden" in part["payload"]["text"]:
            abort("no forbidden")
        return part


async def test_an_output_step_abort_stores_the_rejected_answer_a_stream_abort_nothing() -> None:
    outcome, thread = await _stored(ScriptedModel([text_delta("a forbidden word")]),
                                    Agent(id="a", output_processors=[_Guard()]))
    assert isinstance(outcome, Trip)
    assert [m["role"] for m in thread] == ["signal", "assistant"]  # a sent user signal: role signal, as Mastra's
    assert thread[1]["content"]["parts"][0]["text"] == "a forbidden word"
    outcome, thread = await _stored(ScriptedModel([text_delta("a forbidden word")]),
                                    Agent(id="a", output_processors=[_StreamGuard()]))
    assert isinstance(outcome, Trip) and thread == []


class _AtFinish(Processor):
    """Writes ``data-at-finish`` as it sees the run's ``finish``."""

    id = "at-finish"

    async def process_output_stream(self, *, part: Any, writer: Any, **_: Any) -> Any:
        if part["type"] == "finish":
            await writer.custom({"type": "data-at-finish", "data": {"n": 1}})
        return part


class _OnResponse(Processor):
    """Writes ``data-llm`` from ``process_llm_response`` (an input processor, as Mastra's)."""

    id = "on-response"

    async def process_llm_response(self, *, writer: Any, **_: Any) -> None:
        await writer.custom({"type": "data-llm", "data": {"n": 2}})


async def test_a_part_written_at_finish_stands_before_the_steps_text_one_from_the_response_after() -> None:
    _, thread = await _stored(ScriptedModel([text_delta("ok")]), Agent(id="a", input_processors=[_OnResponse()],
                                                                      output_processors=[_AtFinish()]))
    assert _types(thread[1]) == ["data-at-finish", "text", "data-llm"]


async def test_a_structured_answer_stores_its_object_in_the_metadata() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    run = StepRun(run_id="run-1", resource_id="res", thread_id="th", agent_id="a", epoch=1, step=0, next_seq=0,
                  options={"structured_output": {"schema": schema}}, state=RunState())
    _, thread = await _stored(ScriptedModel([text_delta('{"n": 3}')]), Agent(id="a"), run=run)
    assert thread[1]["content"]["metadata"]["structuredOutput"] == {"n": 3}


async def test_a_signal_drained_mid_run_marks_the_answer_before_it_as_a_response_boundary() -> None:
    store = MemoryStepStore()
    await _loop(ScriptedModel([text_delta("first")])).run(
        _run(), Agent(id="a"), StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]),
        MemorySink("run-1", 0), store)
    state = RunState.of(store.saved[0].state)
    more = Signal("sig-2", {**SIGNAL.payload, "id": "sig-2", "contents": "more"})
    _, thread = await _stored(ScriptedModel([text_delta("second")]), Agent(id="a"), run=_run(step=1, state=state),
                              signals=[more])
    answers = [m for m in thread if m["role"] == "assistant"]
    assert answers[0]["content"]["metadata"]["mastra"] == {"responseBoundary": True}
    assert "mastra" not in answers[1]["content"].get("metadata", {})
