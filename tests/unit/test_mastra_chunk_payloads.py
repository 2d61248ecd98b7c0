"""The step and run chunks carry Mastra's payloads (docs/decisions.md#mastra-step-payloads): text
part ids, ``step-start``'s ``warnings``, ``step-finish``'s and ``finish``'s fields from what the
provider said, and a processor's chunk written at ``finish`` before the last ``step-finish``."""

from __future__ import annotations

from typing import Any

import pytest

from threadline.events import chunks
from threadline.runtime import Agent, tool
from threadline.runtime.model.llm_normalise import StreamNormaliser
from threadline.runtime.model.model_outcome import ModelOutcome
from threadline.runtime.processor import Processor
from threadline.runtime.step.loop import StepLoop
from threadline.runtime.step.ports import Finish, RunState, Signal, StepInputs, StepRun
from threadline.runtime.step.respond import call_details, provider_response
from threadline.testing import MemorySink, MemoryStepStore, ScriptedModel, text_delta, tool_call

pytestmark = pytest.mark.unit

SIGNAL = Signal("sig-1", {"id": "sig-1", "type": "user", "tagName": "user", "contents": "hello",
                          "attributes": {}, "metadata": {}, "createdAt": "2026-01-01T00:00:00Z"})


def test_text_and_reasoning_parts_have_mastras_ids_and_text_end_repeats_its_type() -> None:
    norm = StreamNormaliser(ModelOutcome())
    out: list[dict[str, Any]] = []
    for delta in ({"reasoning_content": "hm"}, {"content": "hi"}):
        out += norm.feed({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": delta}]})
    out += norm.end()
    assert [(c["type"], c["payload"]) for c in out] == [
        ("reasoning-start", {"id": "reasoning-0"}), ("reasoning-delta", {"id": "reasoning-0", "text": "hm"}),
        ("reasoning-end", {"id": "reasoning-0"}), ("text-start", {"id": "txt-0"}),
        ("text-delta", {"id": "txt-0", "text": "hi"}), ("text-end", {"type": "text-end", "id": "txt-0"})]


def test_the_provider_response_is_read_from_the_first_chunk_and_the_usage_report() -> None:
    outcome = ModelOutcome()
    norm = StreamNormaliser(outcome)
    report = {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14,
              "prompt_tokens_details": {"cached_tokens": 6}, "completion_tokens_details": {"reasoning_tokens": 1}}
    norm.feed({"id": "chatcmpl-9", "created": 1796538353, "model": "gpt-x",
               "choices": [{"index": 0, "delta": {"content": "a"}}]})
    norm.feed({"id": "chatcmpl-9", "created": 1796538399, "choices": [], "usage": report})
    outcome.headers = {"server": "uvicorn"}
    assert provider_response(outcome) == {"id": "chatcmpl-9", "timestamp": "2026-12-06T06:25:53.000Z",
                                          "modelId": "gpt-x", "headers": {"server": "uvicorn"}, "rawUsage": report}


def test_step_finish_carries_mastras_fields() -> None:
    usage = {"inputTokens": 10, "outputTokens": 4, "totalTokens": 14, "cachedInputTokens": 6, "reasoningTokens": 1}
    report = {"prompt_tokens": 10}
    chunk = chunks.step_finish_chunk(
        "msg_1", reason="tool-calls", is_continued=True, text="", usage=usage, model="openai/gpt-x",
        raw_reason="tool_calls", tool_calls=[{"toolCallId": "c1", "toolName": "add", "args": {"a": 1}}],
        response={"id": "chatcmpl-9", "timestamp": "T", "modelId": "gpt-x-2", "headers": {"server": "u"},
                  "rawUsage": report}, retry_count=2)
    assert chunk["payload"] == {
        "messageId": "msg_1", "stepResult": {"reason": "tool-calls", "rawReason": "tool_calls", "isContinued": True},
        "output": {"text": "", "toolCalls": [{"toolCallId": "c1", "toolName": "add", "args": {"a": 1}}],
                   "usage": {**usage, "raw": {"inputTokens": {"total": 10, "noCache": 4, "cacheRead": 6},
                                              "outputTokens": {"total": 4, "text": 3, "reasoning": 1},
                                              "raw": report}}},
        "processorRetryCount": 2,
        "metadata": {"providerMetadata": {"openai": {}}, "id": "chatcmpl-9", "timestamp": "T", "modelId": "gpt-x-2",
                     "headers": {"server": "u"},
                     "modelMetadata": {"modelId": "gpt-x", "modelVersion": "v3", "modelProvider": "openai.chat"}}}


def test_usage_in_a_chunk_always_has_the_detail_counts() -> None:
    assert chunks.mastra_usage({"inputTokens": 2, "outputTokens": 1, "totalTokens": 3}, None) == {
        "inputTokens": 2, "outputTokens": 1, "totalTokens": 3, "reasoningTokens": 0, "cachedInputTokens": 0}
    assert chunks.mastra_usage(None, {"prompt_tokens": 1}) is None


def test_finish_repeats_the_last_step_with_the_runs_usage() -> None:
    last = chunks.step_finish_chunk("msg_1", reason="stop", is_continued=False, text="done",
                                    usage={"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}, model="openai/m",
                                    raw_reason="stop", response={"id": "r1", "rawUsage": {"prompt_tokens": 3}})
    chunk = chunks.finish_chunk("stop", finish_reason="stop", usage={"inputTokens": 9, "outputTokens": 2,
                                                                     "totalTokens": 11}, last_step=last["payload"])
    payload = chunk["payload"]
    assert payload["messageId"] == "msg_1" and payload["processorRetryCount"] == 0
    assert payload["stepResult"] == {"reason": "stop", "rawReason": "stop", "isContinued": False}
    assert payload["finishReason"] == "stop"  # Threadline's own, kept
    output = payload.get("output") or {}
    assert output.get("text") == "done" and output.get("toolCalls") == []
    assert output.get("usage") == {"inputTokens": 9, "outputTokens": 2, "totalTokens": 11, "reasoningTokens": 0,
                                   "cachedInputTokens": 0,
                                   "raw": {"inputTokens": {"total": 3, "noCache": 3, "cacheRead": 0},
                                           "outputTokens": {"total": 1, "text": 1, "reasoning": 0},
                                           "raw": {"prompt_tokens": 3}}}
    assert payload.get("response") == {"id": "r1", "modelId": "m", "modelMetadata": {
        "modelId": "m", "modelVersion": "v3", "modelProvider": "openai.chat"}}


class _AtFinish(Processor):
    id = "at-finish"

    async def process_output_stream(self, *, part: Any, writer: Any, **_: Any) -> Any:
        if part.type == "finish":
            await writer.custom({"type": "data-at-finish", "data": {"seen": True}})
        return part


def _run(step: int = 0, state: RunState | None = None) -> StepRun:
    return StepRun(run_id="run-1", resource_id="res", thread_id="th", agent_id="a", epoch=1, step=step, next_seq=0,
                   options={}, state=state or RunState())


async def test_a_chunk_written_at_finish_comes_before_the_last_step_finish_only() -> None:
    model = ScriptedModel([tool_call("add", {"a": 1}, "c1")], [text_delta("two")])
    agent = Agent(id="a", output_processors=[_AtFinish()], tools={})
    loop = StepLoop(default_model="openai/threadline-test", model_api_base=None, model_timeout_s=5, model=model)
    store = MemoryStepStore()
    sink = MemorySink("run-1", 0)
    await loop.run(_run(), agent, StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), sink, store)
    assert "data-at-finish" not in sink.types()  # a step the run continues from has no finish
    sink = MemorySink("run-1", 1, seq=sink.seq)
    outcome = await loop.run(_run(1, RunState.of(store.saved[-1].state)), agent,
                             StepInputs(attempt=1, seq_base=sink.seq, restarted=False), sink, store)
    assert outcome == Finish("stop")
    assert sink.types()[-3:] == ["data-at-finish", "step-finish", "finish"]
    step_start = next(c for c in sink.chunks if c["type"] == "step-start")
    assert step_start["payload"]["warnings"] == []
    finish = sink.chunks[-1]["payload"]
    assert finish["output"]["text"] == "two" and finish["messageId"] == sink.chunks[-2]["payload"]["messageId"]


def test_an_abort_chunk_has_no_payload() -> None:
    abort, finish = chunks.abort_chunks()
    assert "payload" not in abort and finish["type"] == "finish"


class _Cache(Processor):
    id = "cache"

    async def process_llm_request(self, **_: Any) -> Any:
        return {"response": {"chunks": [{"type": "text-delta", "payload": {"id": "txt-0", "text": "cached"}}]}}

    async def process_llm_response(self, *, writer: Any, **_: Any) -> None:
        await writer.custom({"type": "data-llm-response", "data": {}})


async def test_a_cached_reply_is_not_given_to_process_llm_response() -> None:
    model = ScriptedModel()
    loop = StepLoop(default_model="openai/threadline-test", model_api_base=None, model_timeout_s=5, model=model)
    sink = MemorySink("run-1", 0)
    outcome = await loop.run(_run(), Agent(id="a", input_processors=[_Cache()]),
                             StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), sink, MemoryStepStore())
    assert outcome == Finish("stop")
    assert "text-delta" in sink.types() and "data-llm-response" not in sink.types()


def test_a_delivered_notifications_echo_says_delivered_in_its_metadata_too() -> None:
    from threadline.inbox.render import notification_signal

    record = {"id": "ntf_1", "source": "ci", "kind": "build", "priority": "high", "summary": "Build 12 failed"}
    echo = chunks.echo_chunk({**notification_signal(record), "id": "sig_1", "tagName": "notification"})
    assert echo["data"].get("metadata", {})["notification"]["status"] == "delivered"  # as Mastra's echo


def test_a_persisted_signals_run_starts_with_mastras_message_id() -> None:
    signal = {"id": "sig_1", "type": "user", "contents": "later", "createdAt": "2026-01-01T00:00:00Z"}
    start = chunks.synthetic_run_chunks(signal, agent_id="a", run_id="run_1")[0]
    assert start["type"] == "start" and start["payload"] == {"id": "a", "messageId": "persisted-signal:sig_1"}


class _Seen(Processor):
    id = "seen"

    def __init__(self) -> None:
        self.got: dict[str, Any] = {}

    async def process_llm_response(self, *, chunks: Any, warnings: Any, request: Any, raw_response: Any,
                                   **_: Any) -> None:
        self.got.update(types=[c["type"] for c in chunks], finish=chunks[-1]["payload"], warnings=warnings,
                        request=request, raw_response=raw_response)

    async def process_output_step(self, *, provider_metadata: Any, **_: Any) -> None:
        self.got["provider_metadata"] = provider_metadata


async def test_process_llm_response_gets_every_chunk_of_the_step_and_the_calls_details() -> None:
    seen = _Seen()
    loop = StepLoop(default_model="openai/threadline-test", model_api_base=None, model_timeout_s=5,
                    model=ScriptedModel([text_delta("hi")]))
    await loop.run(_run(), Agent(id="a", input_processors=[seen], output_processors=[seen]),
                   StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), MemorySink("run-1", 0),
                   MemoryStepStore())
    # as Mastra's: step-start and response-metadata first, the model's finish last
    assert seen.got["types"] == ["step-start", "response-metadata", "text-delta", "finish"]
    assert seen.got["finish"]["stepResult"]["reason"] == "stop" and "usage" in seen.got["finish"]["output"]
    assert (seen.got["warnings"], seen.got["request"], seen.got["raw_response"]) == ([], {}, {})
    assert seen.got["provider_metadata"] == {"openai": {}}


def test_call_details_carry_the_body_sent_and_the_response_headers() -> None:
    outcome = ModelOutcome(request_body={"model": "m", "stream": True}, headers={"x-request-id": "r1"})
    assert call_details(outcome) == {"warnings": [], "request": {"body": {"model": "m", "stream": True}},
                                     "raw_response": {"headers": {"x-request-id": "r1"}}}


@tool(description="fails")
async def boom(_args: Any) -> None:
    raise ValueError("it broke")


async def test_a_tool_error_carries_mastras_error_object() -> None:
    model = ScriptedModel([tool_call("boom", {}, "c1"), tool_call("nope", {}, "c2")])
    loop = StepLoop(default_model="openai/threadline-test", model_api_base=None, model_timeout_s=5, model=model)
    sink = MemorySink("run-1", 0)
    await loop.run(_run(), Agent(id="a", tools={"boom": boom}),
                   StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), sink, MemoryStepStore())
    errors = {c["payload"]["toolName"]: c["payload"]["error"] for c in sink.chunks if c["type"] == "tool-error"}
    assert errors["boom"] == {"name": "Error", "message": "it broke"}
    assert errors["nope"]["name"] == "ToolNotFoundError" and errors["nope"]["message"].startswith('Tool "nope" not found')


class _StepGuard(Processor):
    id = "step-guard"

    def process_output_step(self, *, text: str, abort: Any, **_: Any) -> None:
        abort(f"no {text}")


async def test_the_finish_after_a_rejected_step_repeats_that_steps_fields() -> None:
    loop = StepLoop(default_model="openai/threadline-test", model_api_base=None, model_timeout_s=5,
                    model=ScriptedModel([text_delta("bad")]))
    sink = MemorySink("run-1", 0)
    await loop.run(_run(), Agent(id="a", output_processors=[_StepGuard()]),
                   StepInputs(attempt=1, seq_base=0, restarted=False, signals=[SIGNAL]), sink, MemoryStepStore())
    assert sink.types()[-3:] == ["step-finish", "tripwire", "finish"]
    step_finish, finish = sink.chunks[-3]["payload"], sink.chunks[-1]["payload"]
    assert step_finish["metadata"]["modelMetadata"]["modelId"] == "threadline-test"  # as Mastra's: the step's metadata
    assert finish["messageId"] == step_finish["messageId"] and finish["output"]["text"] == "bad"
    assert finish["metadata"] == step_finish["metadata"] and finish["stepResult"]["reason"] == "tripwire"
    assert finish["tripwire"]["reason"] == "no bad"
