"""Stage 2 of an attempt: the model's answer. The ``step-start`` chunk; the model called (or a
processor's cached response, or the output a crashed attempt recorded, replayed); each chunk
through ``process_output_stream`` onto the stream; ``process_llm_response``; the response
message's parts built from the *processed* chunks; a structured answer's ``object`` chunks;
``process_output_step`` (before any tool runs)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from threadline._internal.attrdict import AttrDict, wrap
from threadline._internal.faults import armed, pause_point
from threadline.errors import ModelCallError
from threadline.events import chunks
from threadline.events.chunk_types import ModelMetadata, ProviderResponse, ToolCallPayload
from threadline.events.json_types import JSONObject, JSONValue
from threadline.events.messages import now_ms
from threadline.logging import get_logger
from threadline.runtime.message_types import RecordedOutput
from threadline.runtime.model.model_outcome import ModelOutcome, Usage
from threadline.runtime.step.prepare import ModelRequest, ModelSetup
from threadline.runtime.step.state import StepState, add_usage, replay

log = get_logger(__name__)


@dataclass(slots=True, kw_only=True)
class ModelResponse:
    """The model's answer to one attempt, as the output processors let it through."""

    text: str
    """The answer's text (the processed ``text-delta`` chunks joined)."""
    reasoning: str
    """The reasoning text (the processed ``reasoning-delta`` chunks joined)."""
    reasoning_metadata: dict[str, Any] | None = None
    """The ``providerMetadata`` of the reasoning's ``reasoning-end`` (Anthropic's thinking
    ``signature``), kept on the reasoning part so the block goes back to the provider."""
    calls: list[ToolCallPayload]
    """The tool calls ``{toolCallId, toolName, args}``, in order."""
    usage: Usage | None
    """The step's token usage (``inputTokens``, ``outputTokens``…; ``None``: not reported)."""
    finish_reason: str
    """``stop``, ``tool-calls``, ``length``…"""
    object: JSONValue = None
    """The parsed structured answer (``None``: none asked for, or the step called tools)."""
    chunks: list[dict[str, Any]]
    """The chunks as the model streamed them, before the output processors."""
    fresh: bool
    """The model was asked now (not a cached response, not a crashed attempt's replayed output)."""
    raw_finish_reason: str | None = None
    """The provider's own finish reason (``tool_calls``; ``None``: none came, or not asked now)."""
    provider: ProviderResponse | None = None
    """What the provider said of its answer (id, time, model, headers, usage report)."""


async def respond(step: StepState, request: ModelRequest, setup: ModelSetup) -> ModelResponse:
    """Stream the attempt's answer and build the response message from it.

    Raises:
        ModelCallError: the call failed after its retries and fallbacks, or the model finished
            with reason ``other`` and no output, or the structured answer does not parse.
        TripWire: a processor aborted.
    """
    runner, step_no = step.runner, step.run.step
    step.last_step_finish = None  # this attempt's, once concluded
    start = chunks.step_start_chunk(  # no startedAt on a cached replay
        step.response_id, started_at_ms=None if request.cached else int(time.time() * 1000))
    await step.writer.emit(start)
    runner.record_part(wrap(start))  # Mastra's stream_parts hold the step's start too
    step.response_message()
    step.streamed, step.streamed_model = "", request.model
    outcome = ModelOutcome()
    recorded, step.recorded = step.recorded, None
    raw, processed = await _stream(step, _source(request, recorded, outcome, setup), request)
    if recorded is not None:
        outcome.usage = recorded.get("usage")
        outcome.finish_reason = recorded.get("finish_reason", outcome.finish_reason)
    add_usage(step.usage_total, outcome.usage)  # billed even if a processor retries the attempt
    if not request.cached and outcome.finish_reason == "other" and not outcome.text and not outcome.tool_calls:
        raise ModelCallError('the model finished with reason "other" without producing any output (P42)',
                             kind="server_error", retryable=True)
    response = _response(processed, outcome, raw, fresh=recorded is None and not request.cached)
    step.attempt_output = {"text": response.text, "usage": response.usage, "response": response.provider,
                           "raw_reason": response.raw_finish_reason,
                           "model": request.caller.choices[request.caller.index].model}
    steps = [*step.steps, _this_step(step_no, response)]  # "all completed steps so far, including this step"
    # the step's parts first: a part process_llm_response writes follows them, as Mastra stores it
    _add_parts(step, response, _calls_first(processed), request.model)
    if not request.cached:  # as in Mastra: a reply from process_llm_request's cache is not a model response
        await runner.process_llm_response(step_chunks(start, raw, response), model=request.model,
                                          step_number=step_no, steps=steps, from_cache=False,
                                          extra=call_details(outcome))
    if request.spec is not None and response.finish_reason != "tool-calls":  # the final answer is the object
        response.object = request.spec.parse(response.text)
        if response.object is not None:  # stored with the answer, as Mastra's
            content = step.response_message()["content"]
            content["metadata"] = wrap({**(content.get("metadata") or {}), "structuredOutput": response.object})
        await step.writer.emit(chunks.object_chunk(response.object))
        await step.writer.emit(chunks.object_chunk(response.object, final=True))
    if armed("after_tool_call_chunk_published"):
        await step.writer.flush()
        await pause_point("after_tool_call_chunk_published")
    step.judging = True  # an abort now ends the answered step: Mastra's step-finish shows it (decision 123)
    await runner.process_output_step(step.ml, step_number=step_no, steps=steps,
                                     finish_reason=response.finish_reason,
                                     tool_calls=[wrap(c) for c in response.calls] or None, text=response.text,
                                     usage=response.usage, provider_metadata=chunks.step_metadata(
                                         request.caller.choices[request.caller.index].model,
                                         response.provider)["providerMetadata"])
    step.judging = False
    return response


def _source(request: ModelRequest, recorded: RecordedOutput | None, outcome: ModelOutcome,
            setup: ModelSetup) -> AsyncIterator[dict[str, Any]]:
    """Where the attempt's chunks come from: a cached response, a crashed attempt's output, or
    the model."""
    if request.cached:
        return replay(request.cached, outcome)
    if recorded is not None:  # a crashed attempt got this far: same output, same tool call ids
        log.info("model output replayed from the crashed attempt", chunks=len(recorded.get("chunks") or []))
        return replay(recorded, outcome)
    extra = {"response_format": request.spec.response_format()} if request.spec is not None else {}
    return request.caller.stream(outcome, messages=request.prompt,
                                 tools=[t.spec() for t in request.tools.values()] or None,
                                 tool_choice=request.tool_choice, model_settings=request.model_settings,
                                 provider_options=request.provider_options, api_base=setup.api_base,
                                 timeout_s=setup.timeout_s, **extra)


async def _stream(step: StepState, source: Any,
                  request: ModelRequest) -> tuple[list[dict[str, Any]], list[AttrDict]]:
    """Each chunk through the output processors onto the stream. Returns the chunks as streamed
    and as processed (dropped ones left out)."""
    raw: list[dict[str, Any]] = []
    processed: list[AttrDict] = []
    try:
        async for chunk in source:
            raw.append(chunk)
            chunk["from"] = chunks.FROM_AGENT
            part = await step.emit(chunk)
            if part is not None:
                processed.append(part)
                if part["type"] == "text-delta":
                    step.streamed += part["payload"].get("text", "")
    finally:
        await source.aclose()  # a tripwire mid-stream closes the model's HTTP stream now
        if request.caller.choices is step.models:  # a fallback model stays in use for the step's retries
            step.model_index = request.caller.index
    return raw, processed


def _response(processed: list[AttrDict], outcome: ModelOutcome, raw: list[dict[str, Any]], *,
              fresh: bool) -> ModelResponse:
    """The answer as the processors let it through (a ReasoningTransformer's edits included)."""
    def joined(kind: str) -> str:
        return "".join(p["payload"].get("text", "") for p in processed if p["type"] == kind)

    metadata = next((p["payload"]["providerMetadata"] for p in processed
                     if p["type"] == "reasoning-end" and p["payload"].get("providerMetadata")), None)
    return ModelResponse(text=joined("text-delta"), reasoning=joined("reasoning-delta"), reasoning_metadata=metadata,
                         calls=[cast(ToolCallPayload, dict(p["payload"])) for p in processed if p["type"] == "tool-call"],
                         usage=outcome.usage, finish_reason=outcome.finish_reason, chunks=raw, fresh=fresh,
                         raw_finish_reason=outcome.raw_finish_reason, provider=provider_response(outcome))


def provider_response(outcome: ModelOutcome) -> ProviderResponse:
    """What the provider said of its answer, as ``step-finish``'s metadata carries it (only the
    fields it gave; the timestamp from its ``created`` seconds, as ISO 8601 UTC)."""
    got: ProviderResponse = {}
    if outcome.response_id:
        got["id"] = outcome.response_id
    if outcome.created_s is not None:
        when = datetime.fromtimestamp(outcome.created_s, tz=UTC)
        got["timestamp"] = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if outcome.model_id:
        got["modelId"] = outcome.model_id
    if outcome.headers is not None:
        got["headers"] = outcome.headers
    if outcome.raw_usage is not None:
        got["rawUsage"] = outcome.raw_usage
    return got


def step_chunks(start: Mapping[str, Any], raw: list[dict[str, Any]], response: ModelResponse) -> list[dict[str, Any]]:
    """Every chunk of the step, as Mastra's ``processLLMResponse`` gets them: ``step-start``,
    ``response-metadata`` (the provider's ``id``, ``timestamp`` and ``modelId``, those it gave),
    the model's chunks as streamed, then the model's ``finish`` (``stepResult {reason, rawReason?}``,
    ``output {usage}``)."""
    got = response.provider or {}
    result: dict[str, Any] = {"reason": response.finish_reason}
    if response.raw_finish_reason is not None:
        result["rawReason"] = response.raw_finish_reason
    usage = chunks.mastra_usage(response.usage, got.get("rawUsage"))
    return [{"type": start["type"], "from": chunks.FROM_AGENT, "payload": start["payload"]},
            {"type": "response-metadata", "from": chunks.FROM_AGENT,
             "payload": {k: got[k] for k in ("id", "timestamp", "modelId") if k in got}},
            *raw,
            {"type": "finish", "from": chunks.FROM_AGENT, "payload": {"stepResult": result, "output": {"usage": usage}}}]


def call_details(outcome: ModelOutcome) -> dict[str, Any]:
    """``processLLMResponse``'s ``warnings`` (the provider's call warnings: litellm reports none, so
    ``[]``), ``request`` (``{body}``: the JSON body sent; ``{}`` when litellm's own client sent it)
    and ``raw_response`` (``{headers}``: the HTTP response headers; ``{}`` when not known)."""
    return {"warnings": [],
            "request": {"body": outcome.request_body} if outcome.request_body is not None else {},
            "raw_response": {"headers": outcome.headers} if outcome.headers is not None else {}}


def _this_step(step_no: int, response: ModelResponse) -> dict[str, Any]:
    """The step being answered, as ``steps`` shows it to ``process_llm_response`` and
    ``process_output_step`` (its tools have not run: ``toolResults`` is empty)."""
    return {"stepNumber": step_no, "text": response.text, "toolCalls": response.calls, "toolResults": [],
            "finishReason": response.finish_reason, "usage": response.usage}


_STEP_PARTS = ("step-start", "text", "reasoning", "tool-invocation", "file")
"""The parts a model step adds: after one of them, a later step starts with a ``step-start``."""


def _add_parts(step: StepState, response: ModelResponse, calls_first: bool, model: str) -> None:
    """The step's parts on the response message, as Mastra stores them: ``step-start`` (``createdAt``
    and ``model`` ``<provider>/<modelId>``) unless this is the message's first step, the reasoning,
    then the text and the tool invocations in the order streamed (calls whose input began before
    the text first); the message's ``metadata`` gets the ``modelId`` and ``provider``. ``step.parts_at``:
    where the step's own parts begin (after its marker)."""
    content = step.response_message()["content"]
    parts = content["parts"]
    about = _stamp_model(content, model)
    if any(p.get("type") in _STEP_PARTS for p in parts):  # the message's first step has no marker
        parts.append(wrap({"type": "step-start", "createdAt": now_ms(),
                           "model": f"{about['modelProvider']}/{about['modelId']}"}))
    step.parts_at = len(parts)
    if response.reasoning:
        meta = response.reasoning_metadata
        signature = ((meta or {}).get("anthropic") or {}).get("signature")
        parts.append(wrap({"type": "reasoning", "reasoning": response.reasoning,
                           "details": [{"type": "text", "text": response.reasoning,
                                        **({"signature": signature} if signature else {})}],
                           **({"providerMetadata": meta} if meta else {})}))
    invocations = [wrap({"type": "tool-invocation", "toolInvocation": {
        "state": "call", "toolCallId": call["toolCallId"], "toolName": call["toolName"],
        "args": call.get("args") or {}}}) for call in response.calls]
    texts = [wrap({"type": "text", "text": response.text})] if response.text else []
    parts.extend(invocations + texts if calls_first else texts + invocations)


def add_error_parts(step: StepState, error: JSONObject) -> None:
    """A failed model call's end on the response message, as Mastra records a terminal error: the
    text the attempt streamed before it failed (with the model's ``metadata``, as a step's), then
    an ``error`` part ``{type: "error", error: {name, message}}`` (the provider error's name,
    ``Error`` when it has none). ``error``: the run's error (``model_error``)."""
    content = step.response_message()["content"]
    if step.streamed and step.streamed_model is not None:
        _stamp_model(content, step.streamed_model)
        content["parts"].append(wrap({"type": "text", "text": step.streamed}))
    content["parts"].append(wrap({"type": "error", "error": {"name": error.get("name") or "Error",
                                                  "message": error.get("message") or ""}}))


def _stamp_model(content: AttrDict, model: str) -> ModelMetadata:
    """The message's ``metadata`` gets the ``modelId`` and ``provider`` of ``model``; returns
    Mastra's ``modelMetadata`` of it."""
    about = chunks.step_metadata(model, None)["modelMetadata"]
    content["metadata"] = wrap({**(content.get("metadata") or {}), "modelId": about["modelId"],
                                "provider": about["modelProvider"]})
    return about


def _calls_first(processed: list[AttrDict]) -> bool:
    """Did a tool call's input begin streaming before the step's first text?"""
    kinds = [p["type"] for p in processed]
    first_text = kinds.index("text-delta") if "text-delta" in kinds else len(kinds)
    return any(k in ("tool-call-input-streaming-start", "tool-call") for k in kinds[:first_text])
