"""A processor retry as Mastra shows it, on the step loop's in-memory ports: the rejected attempt
ends with ``step-finish`` (``stepResult.reason: "retry"`` and the processor's reason, id and
metadata) before the ``attempt-discarded`` marker; the retried request carries Mastra's feedback
as a system message; ``retry_count`` counts the run's retries, not one step's."""

from __future__ import annotations

from typing import Any

import pytest

from threadline.runtime import Agent, Processor
from threadline.runtime.step.loop import StepLoop
from threadline.runtime.step.ports import Continue, Finish, RunState, Signal, StepInputs, StepRun, Trip
from threadline.runtime.step.retry import feedback_text, retry_step_finish
from threadline.testing import MemorySink, MemoryStepStore, ScriptedModel, run_output, text_delta

pytestmark = pytest.mark.unit

SIGNAL = Signal("sig-1", {"id": "sig-1", "type": "user", "tagName": "user", "contents": "explain",
                          "attributes": {}, "metadata": {}, "createdAt": "2026-01-01T00:00:00Z"})
FEEDBACK = ("[Processor Feedback] Your previous response was not accepted: add detail. "
            "Please try again with the feedback in mind.")


class NeedsDetail(Processor):
    """Rejects (with a retry) a text step without the word ``detail``; records ``retry_count``."""

    id = "needs-detail"

    def __init__(self) -> None:
        self.seen: list[int] = []

    async def process_output_step(self, *, text: str, abort: Any, retry_count: int, finish_reason: str,
                                  **_: Any) -> None:
        self.seen.append(retry_count)
        if finish_reason == "stop" and "detail" not in text:
            abort("add detail", retry=True, metadata={"why": "short"})


def _run(step: int = 0, state: RunState | None = None) -> StepRun:
    return StepRun(run_id="run-1", resource_id="res", thread_id="th", agent_id="a", epoch=1, step=step, next_seq=0,
                   options={}, state=state or RunState())


def _loop(model: Any) -> StepLoop:
    return StepLoop(default_model="openai/threadline-test", model_api_base=None, model_timeout_s=5, model=model)


def _inputs(**kw: Any) -> StepInputs:
    return StepInputs(attempt=1, seq_base=0, restarted=False, **kw)


def test_the_feedback_is_mastras_sentence() -> None:
    assert feedback_text("add detail") == FEEDBACK


def test_a_retry_step_finish_carries_the_providers_reason_only_for_a_processors_abort() -> None:
    retry = {"retryProcessorId": "p", "retryReason": "add detail", "retryMetadata": None}
    answered = {"text": "Short.", "usage": None, "raw_reason": "tool_calls"}
    aborted = retry_step_finish("m", retry, answered, retry_count=2)["payload"]
    assert aborted["stepResult"]["rawReason"] == "tool_calls" and aborted["processorRetryCount"] == 2
    assert aborted["processorRetryFeedback"] == FEEDBACK
    api_error = retry_step_finish("m", None, None, retry_count=1)["payload"]  # process_api_error's retry
    assert api_error["stepResult"] == {"reason": "retry", "isContinued": True}
    assert api_error["processorRetryCount"] == 1 and "processorRetryFeedback" not in api_error


async def test_a_rejected_attempt_ends_with_a_retry_step_finish_then_is_declared_dead() -> None:
    model = ScriptedModel([text_delta("Short.")], [text_delta("More detail.")])
    sink, store = MemorySink("run-1", 0), MemoryStepStore()
    agent = Agent(id="a", instructions="be brief", output_processors=[NeedsDetail()], max_processor_retries=2)
    outcome = await _loop(model).run(_run(), agent, _inputs(signals=[SIGNAL]), sink, store)
    assert outcome == Finish("stop")
    kinds = [(c["type"], c["attempt"]) for c in sink.chunks if c["type"] not in ("start", "data-user-message")]
    assert kinds == [("step-start", 1), ("text-delta", 1), ("step-finish", 1), ("attempt-discarded", 2),
                     ("step-start", 2), ("text-delta", 2), ("step-finish", 2), ("finish", 2)]
    rejected = next(c for c in sink.chunks if c["type"] == "step-finish")["payload"]
    assert rejected["stepResult"] == {"reason": "retry", "isContinued": True, "retryProcessorId": "needs-detail",
                                      "retryReason": "add detail", "retryMetadata": {"why": "short"}}
    assert rejected["output"]["text"] == "Short."
    # Mastra's: the retry's count and feedback; the accepted step and the finish say 0
    assert rejected["processorRetryCount"] == 1 and rejected["processorRetryFeedback"] == FEEDBACK
    accepted, finish = [c["payload"] for c in sink.chunks if c["type"] in ("step-finish", "finish")][1:]
    assert accepted["processorRetryCount"] == 0 and "processorRetryFeedback" not in accepted
    assert finish["processorRetryCount"] == 0
    # the retried request: the instructions, then Mastra's feedback as a system message, then the user
    assert model.prompts[1][:2] == [{"role": "system", "content": "be brief"}, {"role": "system", "content": FEEDBACK}]
    assert model.prompts[1][2:] == model.prompts[0][1:]  # the rejected answer is not in it
    [saved] = store.saved
    assert saved.text == "More detail."
    stored = str([m for m, source in saved.entries if source in ("input", "response")])
    assert "Short." not in stored and "Processor Feedback" not in stored


async def test_the_feedback_stays_in_later_requests_once() -> None:
    first, sink = MemoryStepStore(), MemorySink("run-1", 0)
    agent = Agent(id="a", output_processors=[NeedsDetail()], max_processor_retries=3)
    await _loop(ScriptedModel([text_delta("a")], [text_delta("b")], [text_delta("detail")])).run(
        _run(), agent, _inputs(signals=[SIGNAL]), sink, first)
    state = RunState.of(first.saved[0].state)
    more = Signal("sig-2", {**SIGNAL.payload, "id": "sig-2", "contents": "and more"})
    model = ScriptedModel([text_delta("more detail")])
    await _loop(model).run(_run(step=1, state=state), agent, _inputs(signals=[more]), MemorySink("run-1", 1),
                           MemoryStepStore())
    assert [m for m in model.prompts[0] if m["role"] == "system"] == [{"role": "system", "content": FEEDBACK}]


async def test_retry_count_counts_the_runs_retries_and_the_cap_is_the_runs() -> None:
    checker = NeedsDetail()
    agent = Agent(id="a", output_processors=[checker], max_processor_retries=1)
    first = MemoryStepStore()
    outcome = await _loop(ScriptedModel([text_delta("a")], [{"type": "tool-call", "payload": {
        "toolCallId": "c1", "toolName": "nothing", "args": {}}}])).run(
        _run(), agent, _inputs(signals=[SIGNAL]), MemorySink("run-1", 0), first)
    assert outcome == Continue("tool-calls") and checker.seen == [0, 1]
    state = RunState.of(first.saved[0].state)
    assert state.retry_count == 1  # not reset by the accepted step
    sink = MemorySink("run-1", 1)
    outcome = await _loop(ScriptedModel([text_delta("still short")])).run(
        _run(step=1, state=state), agent, _inputs(), sink, MemoryStepStore())
    assert checker.seen == [0, 1, 1]  # the later step sees the run's count ...
    assert isinstance(outcome, Trip) and outcome.tripwire["retry"] is True  # ... and the budget is spent
    assert "attempt-discarded" not in [c["type"] for c in sink.chunks]


class RetryFromInput(Processor):
    id = "input-retry"

    async def process_input(self, *, abort: Any, **_: Any) -> None:
        abort("retry from input", retry=True)


async def test_a_retry_asked_for_in_process_input_ends_the_run_whatever_the_budget() -> None:
    model = ScriptedModel()
    sink = MemorySink("run-1", 0)
    agent = Agent(id="a", input_processors=[RetryFromInput()], max_processor_retries=3)
    outcome = await _loop(model).run(_run(), agent, _inputs(signals=[SIGNAL]), sink, MemoryStepStore())
    assert isinstance(outcome, Trip) and outcome.tripwire["retry"] is True  # decision 122
    assert model.calls == [] and [c["type"] for c in sink.chunks] == ["start", "tripwire", "finish"]


class ArgsReport(Processor):
    """Records what ``process_llm_response`` and ``process_output_step`` are given, and aborts the
    run from inside the step as the worker does when an abort arrives."""

    id = "args-report"

    def __init__(self, loop: StepLoop | None = None) -> None:
        self.loop = loop
        self.seen: dict[str, Any] = {}
        self.heard: list[str] = []

    async def process_llm_response(self, *, steps: Any, abort_signal: Any, tracing_context: Any, **_: Any) -> None:
        self.seen["llm_response"] = [s["text"] for s in steps]
        self.seen["tracing"] = tracing_context.current_span  # tracing is off in unit tests
        self.seen["aborted_before"] = abort_signal.aborted
        abort_signal.add_listener(lambda: self.heard.append("abort"))
        if self.loop is not None:
            self.loop.abort("run-1")
        self.seen["aborted_after"] = abort_signal.aborted

    async def process_output_step(self, *, steps: Any, step_number: int, **_: Any) -> None:
        self.seen["output_step"] = [(s["stepNumber"], s["text"], s["toolResults"]) for s in steps]


async def test_steps_include_the_current_step_and_every_method_gets_abort_signal_and_tracing_context() -> None:
    first = MemoryStepStore()
    agent = Agent(id="a", input_processors=[ArgsReport()], output_processors=[ArgsReport()])
    await _loop(ScriptedModel([text_delta("one")])).run(_run(), agent, _inputs(signals=[SIGNAL]),
                                                        MemorySink("run-1", 0), first)
    state = RunState.of(first.saved[0].state)
    loop = _loop(ScriptedModel([text_delta("two")]))
    reporter, checker = ArgsReport(loop), ArgsReport()
    agent = Agent(id="a", input_processors=[reporter], output_processors=[checker])
    more = Signal("sig-2", {**SIGNAL.payload, "id": "sig-2", "contents": "and more"})
    await loop.run(_run(step=1, state=state), agent, _inputs(signals=[more]), MemorySink("run-1", 1), MemoryStepStore())
    assert reporter.seen["llm_response"] == ["one", "two"]  # "all completed steps so far, including this step"
    assert checker.seen["output_step"] == [(0, "one", []), (1, "two", [])]
    assert reporter.seen["tracing"] is None
    assert reporter.seen["aborted_before"] is False and reporter.seen["aborted_after"] is True
    assert reporter.heard == ["abort"]
    loop.abort("run-1")  # the step is over: nothing to abort, nothing raised


async def test_a_streams_result_carries_the_tripwire_that_ended_it() -> None:
    trip = {"reason": "step mentions x", "retry": False, "metadata": None, "processorId": "guard"}
    chunks = [{"runId": "r", "seq": 0, "step": 0, "attempt": 1, "type": "start", "payload": {}},
              {"runId": "r", "seq": 1, "step": 0, "attempt": 1, "type": "tripwire", "payload": trip},
              {"runId": "r", "seq": 2, "step": 0, "attempt": 1, "type": "finish",
               "payload": {"stepResult": {"reason": "tripwire"}, "finishReason": "other", "tripwire": trip}}]
    assert await run_output(chunks).tripwire() == trip  # Mastra's result.tripwire
    assert await run_output(chunks).finish_reason() == "other"  # no step-finish rejected: Mastra's "other"
    chunks.insert(1, {"runId": "r", "seq": 1, "step": 0, "attempt": 1, "type": "step-finish",
                      "payload": {"stepResult": {"reason": "tripwire", "isContinued": False}}})
    assert await run_output(chunks).finish_reason() == "tripwire"  # process_output_step rejected the answer
    chunks[1:] = [{**chunks[3], "seq": 1, "payload": {"stepResult": {"reason": "stop"}, "finishReason": "stop"}}]
    assert await run_output(chunks).tripwire() is None
    assert await run_output(chunks).finish_reason() == "stop"


class Guard(Processor):
    id = "guard"

    async def process_output_step(self, *, text: str, abort: Any, **_: Any) -> None:
        if "x" in text:
            abort("step mentions x")


async def test_an_answer_rejected_for_good_ends_with_a_tripwire_step_finish_then_the_tripwire() -> None:
    sink = MemorySink("run-1", 0)
    agent = Agent(id="a", output_processors=[Guard()])
    outcome = await _loop(ScriptedModel([text_delta("x marks")])).run(_run(), agent, _inputs(signals=[SIGNAL]),
                                                                      sink, MemoryStepStore())
    assert isinstance(outcome, Trip)
    assert sink.types()[-4:] == ["text-delta", "step-finish", "tripwire", "finish"]  # Mastra's step-finish, decision 2's tripwire
    step_finish = next(c for c in sink.chunks if c["type"] == "step-finish")["payload"]
    assert step_finish["stepResult"] == {"reason": "tripwire", "isContinued": False}
    assert step_finish["output"]["text"] == "x marks"


class RejectResult(Processor):
    id = "result-abort"

    async def process_output_result(self, *, abort: Any, **_: Any) -> None:
        abort("final answer rejected")


async def test_an_abort_in_process_output_result_ends_with_mastras_finish() -> None:
    sink = MemorySink("run-1", 0)
    agent = Agent(id="a", output_processors=[RejectResult()])
    outcome = await _loop(ScriptedModel([text_delta("answer")])).run(_run(), agent, _inputs(signals=[SIGNAL]),
                                                                     sink, MemoryStepStore())
    assert isinstance(outcome, Trip)
    assert sink.types()[-4:] == ["text-delta", "step-finish", "tripwire", "finish"]
    finish = sink.chunks[-1]["payload"]
    # Mastra's: the accepted step's reason, no response; Threadline's tripwire and finishReason stay
    assert finish["stepResult"]["reason"] == "stop" and "response" not in finish
    assert finish["tripwire"]["processorId"] == "result-abort" and finish["finishReason"] == "other"


class UpperResult(Processor):
    id = "result-upper"

    def process_output_result(self, *, messages: Any, **_: Any) -> Any:
        def upper(m: Any) -> Any:
            parts = [{**p, "text": p["text"].upper()} if p.get("type") == "text" else p
                     for p in m["content"]["parts"]]
            return {**m, "content": {**m["content"], "parts": parts}}
        return [upper(m) if m["role"] == "assistant" else m for m in messages]


async def test_the_finish_tells_the_text_process_output_result_left() -> None:
    sink = MemorySink("run-1", 0)
    agent = Agent(id="a", output_processors=[UpperResult()])
    await _loop(ScriptedModel([text_delta("quiet words")])).run(_run(), agent, _inputs(signals=[SIGNAL]),
                                                                sink, MemoryStepStore())
    finish = sink.chunks[-1]["payload"]
    assert finish["text"] == "QUIET WORDS"  # Mastra's result.text (decision 165)
    assert finish["output"]["text"] == "quiet words"  # the step's streamed text, as Mastra's finish
    plain = MemorySink("run-1", 0)
    await _loop(ScriptedModel([text_delta("quiet words")])).run(_run(), Agent(id="a"), _inputs(signals=[SIGNAL]),
                                                                plain, MemoryStepStore())
    assert "text" not in plain.chunks[-1]["payload"]  # unchanged: nothing added
