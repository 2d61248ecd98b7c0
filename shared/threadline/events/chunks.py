"""The chunk envelope of the per-thread chunk topics (invariant 5, docs/decisions.md §15).

Hot path note: workers build chunk dicts directly and encode them with orjson; this model is the
published schema and what subscribers may validate against. In the process, each kind's body is a
``TypedDict`` (:mod:`threadline.events.chunk_types`): the builders below return them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field

from threadline.events.chunk_types import (
    AbortChunk,
    AttemptDiscardedChunk,
    AttemptDiscardedPayload,
    ChunkBody,
    ChunkKind,
    EchoChunk,
    EchoData,
    ErrorChunk,
    FinishChunk,
    FinishPayload,
    JsonObject,
    JsonValue,
    MastraUsage,
    ObjectChunk,
    ProviderResponse,
    StartChunk,
    StepFinishChunk,
    StepFinishPayload,
    StepMetadata,
    StepOutput,
    StepResult,
    StepStartChunk,
    StepStartPayload,
    ToolCallPayload,
    ToolErrorChunk,
    ToolResultChunk,
    ToolResultPayload,
    TripwireChunk,
    Usage,
)
from threadline.ops import tracing


class Chunk(BaseModel):
    """One chunk: Mastra's ``type``/``payload`` plus the addressing fields.

    ``seq`` increases strictly within a run and is never reused. ``attempt`` numbers executions
    of a step; ``attempt-discarded`` tells subscribers to drop a dead attempt's chunks.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    type: str
    """Mastra chunk type: ``start``, ``step-start``, ``text-delta``, ``tool-call``, ``tool-result``,
    ``step-finish``, ``finish``, ``tripwire``, ``error``, ``abort``, ``data-*``, …"""
    run_id: str = Field(alias="runId")
    """Mastra's ``runId``."""
    step: int
    attempt: int
    seq: int
    payload: dict[str, Any] | None = None
    from_: str | None = Field(default=None, alias="from")
    data: Any = None
    """Body of ``data-*`` chunks."""
    transient: bool | None = None


# --- builders: the chunk bodies every producer writes (the envelope fields come from ``envelope``)

FROM_AGENT: Final = "AGENT"
"""The ``from`` field of every chunk a run writes."""
CHUNK_HEADERS: list[tuple[str, bytes]] = [("tl-type", b"chunk")]
"""Kafka headers of every chunk record."""


def chunk_headers() -> list[tuple[str, bytes]]:
    """The headers of a chunk record: :data:`CHUNK_HEADERS`, and the current trace context
    (``traceparent``) when tracing is on (``threadline.ops.tracing``)."""
    return CHUNK_HEADERS + tracing.current_headers()


_B = TypeVar("_B", dict[str, Any], ChunkBody)


def envelope(body: _B, *, run_id: str, step: int, attempt: int, seq: int) -> _B:
    """Stamp ``body`` in place with the addressing fields (``runId``, ``step``, ``attempt``,
    ``seq``); returns it."""
    body["runId"] = run_id
    body["step"] = step
    body["attempt"] = attempt
    body["seq"] = seq
    return body


def start_chunk(agent_id: str, message_id: str) -> StartChunk:
    """A run's first chunk."""
    return {"type": ChunkKind.START, "from": FROM_AGENT, "payload": {"id": agent_id, "messageId": message_id}}


def step_start_chunk(message_id: str, *, started_at_ms: int | None) -> StepStartChunk:
    """A step's first chunk: ``{messageId, warnings, startedAt}`` as Mastra's thread stream has it
    (``warnings``: the provider's call warnings, none that Threadline knows of, so ``[]``);
    ``started_at_ms`` is absent on a replayed (cached) response."""
    payload: StepStartPayload = {"messageId": message_id, "warnings": []}
    if started_at_ms is not None:
        payload["startedAt"] = started_at_ms
    return {"type": ChunkKind.STEP_START, "from": FROM_AGENT, "payload": payload}


def step_finish_chunk(message_id: str, *, reason: str | None, is_continued: bool, text: str | None,
                      usage: Usage | None, has_text: bool = True, model: str | None = None,
                      raw_reason: str | None = None, tool_calls: Sequence[ToolCallPayload] = (),
                      response: ProviderResponse | None = None, retry_count: int = 0) -> StepFinishChunk:
    """A step's last chunk, as Mastra's: ``stepResult {reason, rawReason?, isContinued}``,
    ``output {text?, toolCalls, usage}`` (``has_text=False`` leaves ``output.text`` out, as on a
    failed step; ``usage`` by :func:`mastra_usage`), ``processorRetryCount`` (``retry_count``) and,
    when ``model`` (the litellm string of the model that answered, e.g. ``openai/gpt-4o``) is given,
    ``metadata`` by :func:`step_metadata` from ``response`` (what the provider said of its answer)."""
    raw_usage = response.get("rawUsage") if response else None
    output: StepOutput = {"toolCalls": list(tool_calls), "usage": mastra_usage(usage, raw_usage)}
    if has_text:
        output = {"text": text, **output}
    result: StepResult = {"reason": reason, "isContinued": is_continued}
    if raw_reason is not None:
        result["rawReason"] = raw_reason
    payload: StepFinishPayload = {"messageId": message_id, "stepResult": result, "output": output,
                                  "processorRetryCount": retry_count}
    if model:
        payload["metadata"] = step_metadata(model, response)
    return {"type": ChunkKind.STEP_FINISH, "from": FROM_AGENT, "payload": payload}


MODEL_VERSION: Final = "v3"
"""``modelMetadata.modelVersion``: the version of the model interface (the AI SDK's language model
specification) whose stream shapes the chunks follow."""


def step_metadata(model: str, response: ProviderResponse | None) -> StepMetadata:
    """Mastra's ``metadata`` of a step from the litellm model string (``openai/gpt-4o``; a bare name
    is OpenAI's) and what the provider said of its answer: ``modelId`` (the model the provider
    says answered, else ``gpt-4o``), ``modelMetadata {modelId, modelVersion, modelProvider}``
    (``openai.chat``: the provider, through its chat completions API), ``providerMetadata
    {<provider>: {}}``, and the response's ``id``, ``timestamp`` (ISO 8601, UTC) and ``headers``
    where the provider gave them (docs/decisions.md#mastra-step-payloads)."""
    route, _, model_id = model.rpartition("/")
    provider = route.split("/", 1)[0] or "openai"
    got = response or {}
    meta: StepMetadata = {"providerMetadata": {provider: {}}, "modelId": got.get("modelId") or model_id,
                          "modelMetadata": {"modelId": model_id, "modelVersion": MODEL_VERSION,
                                            "modelProvider": f"{provider}.chat"}}
    if got.get("id"):
        meta["id"] = got["id"]
    if got.get("timestamp"):
        meta["timestamp"] = got["timestamp"]
    if got.get("headers") is not None:
        meta["headers"] = got["headers"]
    return meta


def mastra_usage(usage: Usage | None, raw: JsonObject | None) -> MastraUsage | None:
    """A step's (or run's) usage as Mastra's chunks carry it: the counts, ``reasoningTokens`` and
    ``cachedInputTokens`` always (0 when not reported) and, with the provider's report ``raw``,
    ``raw {inputTokens {total, noCache, cacheRead}, outputTokens {total, text, reasoning}, raw}``."""
    if usage is None:
        return None
    out = cast(MastraUsage, {**usage})
    cached, reasoning = usage.get("cachedInputTokens", 0), usage.get("reasoningTokens", 0)
    out["reasoningTokens"], out["cachedInputTokens"] = reasoning, cached
    if raw is not None:
        inp, outp = usage.get("inputTokens", 0), usage.get("outputTokens", 0)
        out["raw"] = {"inputTokens": {"total": inp, "noCache": inp - cached, "cacheRead": cached},
                      "outputTokens": {"total": outp, "text": outp - reasoning, "reasoning": reasoning}, "raw": raw}
    return out


def finish_chunk(reason: str, *, finish_reason: str, usage: Usage | None = None, with_output: bool = True,
                 tripwire: JsonObject | None = None, last_step: StepFinishPayload | None = None) -> FinishChunk:
    """A run's last chunk: ``stepResult {reason, isContinued: false}``, ``finishReason``,
    ``output.usage`` (by :func:`mastra_usage`, its ``inputTokens``, ``outputTokens`` and
    ``totalTokens`` 0 where ``usage`` has none; left out when ``with_output`` is False) and the
    ``tripwire`` that ended it, if any.

    With ``last_step`` (the payload of the run's last ``step-finish``), Mastra's fields too:
    ``messageId``, ``stepResult {rawReason, isContinued}``, ``metadata``, ``output {text,
    toolCalls}``, ``processorRetryCount`` and ``response`` (the metadata's ``id``, ``timestamp``,
    ``modelId``, ``headers``, ``modelMetadata``); ``usage`` is the run's, with the last step's
    ``raw`` report."""
    payload: FinishPayload = {"stepResult": {"reason": reason, "isContinued": False}, "finishReason": finish_reason}
    if with_output:  # the run's counts, 0 where no step reported one (a cached reply), as Mastra's
        usage = cast(Usage, {**_ZERO_COUNTS, **(usage or {})})
        payload["output"] = {"usage": mastra_usage(usage, None)}
    if last_step is not None:
        _from_last_step(payload, last_step, usage if with_output else None)
    if tripwire is not None:
        payload["tripwire"] = tripwire
    return {"type": ChunkKind.FINISH, "from": FROM_AGENT, "payload": payload}


_RESPONSE_KEYS = ("id", "timestamp", "modelId", "headers", "modelMetadata")
_ZERO_COUNTS: Final = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}


def _from_last_step(payload: FinishPayload, last: StepFinishPayload, usage: Usage | None) -> None:
    payload["messageId"] = last["messageId"]
    raw_reason = last["stepResult"].get("rawReason")
    result: StepResult = {"reason": payload["stepResult"]["reason"], "isContinued": False}
    if raw_reason is not None:
        result["rawReason"] = raw_reason
    payload["stepResult"] = result
    step_output = last["output"]
    step_usage = cast(MastraUsage, step_output.get("usage") or {})
    run_usage = mastra_usage(usage, None)
    if run_usage is not None and "raw" in step_usage:
        run_usage["raw"] = step_usage["raw"]  # the last step's report, as in Mastra
    output: StepOutput = {"toolCalls": step_output.get("toolCalls", []), "usage": run_usage}
    if "text" in step_output:
        output["text"] = step_output["text"]
    payload["output"] = output
    payload["processorRetryCount"] = last.get("processorRetryCount", 0)
    if "metadata" in last:
        payload["metadata"] = last["metadata"]
        meta = cast(Mapping[str, JsonValue], last["metadata"])
        payload["response"] = {k: meta[k] for k in _RESPONSE_KEYS if k in meta}


def object_chunk(obj: JsonValue, *, final: bool = False) -> ObjectChunk:
    """Structured output: ``object`` (the object so far) or ``object-result`` (the validated
    object); as in Mastra, the object is at the top level (``{type, from, object}``, no payload)."""
    return {"type": ChunkKind.OBJECT_RESULT if final else ChunkKind.OBJECT, "from": FROM_AGENT, "object": obj}


def error_chunk(error: JsonObject) -> ErrorChunk:
    """The error that ends a run (``{kind, message, ...}``)."""
    return {"type": ChunkKind.ERROR, "from": FROM_AGENT, "payload": {"error": error}}


def tripwire_chunk(tripwire: JsonObject) -> TripwireChunk:
    """A processor blocked the run: its verdict ``{reason, retry, metadata, processorId}``, every
    key always there (``retry: false``, ``metadata: null`` when not given;
    docs/decisions.md#mastra-step-payloads)."""
    return {"type": ChunkKind.TRIPWIRE, "from": FROM_AGENT, "payload": tripwire}


def attempt_discarded_chunk(step: int, attempt: int, reason: str,
                            retry: JsonObject | None = None) -> AttemptDiscardedChunk:
    """Subscribers drop the chunks of ``attempt`` of ``step`` (it died or was retried).

    ``retry`` (a processor asked for the retry): ``{retryProcessorId, retryReason,
    retryMetadata}``, merged into the payload so a subscriber can say why the text it saw was
    withdrawn.
    """
    payload: AttemptDiscardedPayload = {"step": step, "attempt": attempt, "reason": reason}
    if retry:
        payload.update(cast(AttemptDiscardedPayload, retry))
    return {"type": ChunkKind.ATTEMPT_DISCARDED, "from": FROM_AGENT, "payload": payload}


def tool_result_chunk(call_id: str, tool_name: str, args: JsonValue, result: JsonValue, *,
                      provider_metadata: JsonObject | None = None) -> ToolResultChunk:
    """A tool's (final) result; ``providerMetadata`` when given (a sub-agent call's
    ``{mastra: {modelOutput}}``, as Mastra's)."""
    payload: ToolResultPayload = {"toolCallId": call_id, "toolName": tool_name, "args": args, "result": result}
    if provider_metadata is not None:
        payload["providerMetadata"] = provider_metadata
    return {"type": ChunkKind.TOOL_RESULT, "from": FROM_AGENT, "payload": payload}


def tool_error_chunk(call_id: str, tool_name: str, args: JsonValue, error: str, *,
                     name: str = "Error") -> ToolErrorChunk:
    """A tool's error, as Mastra's: ``error {name, message}`` (``message``: the error's text;
    ``name``: ``ToolNotFoundError`` or ``Error``, docs/decisions.md#tool-error-name)."""
    return {"type": ChunkKind.TOOL_ERROR, "from": FROM_AGENT,
            "payload": {"toolCallId": call_id, "toolName": tool_name, "args": args,
                        "error": {"name": name, "message": error}}}


_ECHOED = ("id", "type", "tagName", "contents", "createdAt", "acceptedAt", "attributes", "metadata")


def echo_chunk(signal: Mapping[str, object]) -> EchoChunk:
    """The stream echo of a delivered signal: ``data-user-message`` for user signals, else
    ``data-signal``; ``data`` holds its non-empty fields, always ``contents``."""
    kind: Literal["data-user-message", "data-signal"] = (
        ChunkKind.DATA_USER_MESSAGE if signal["type"] == "user" else ChunkKind.DATA_SIGNAL)
    data = {k: signal[k] for k in _ECHOED if k in signal and signal[k] not in (None, {}, [])}
    data.setdefault("contents", signal.get("contents", ""))
    return {"type": kind, "data": cast(EchoData, data), "transient": True}


def abort_chunks() -> list[AbortChunk | FinishChunk]:
    """``abort`` (no payload, as Mastra's) then ``finish {stepResult.reason: "abort"}``: how an
    aborted run ends."""
    return [{"type": ChunkKind.ABORT, "from": FROM_AGENT},
            finish_chunk("abort", finish_reason="abort", with_output=False)]


def synthetic_run_chunks(signal: Mapping[str, Any], *, agent_id: str, run_id: str) -> list[ChunkBody]:
    """``start``, the signal's echo and ``finish``, stamped, of a run that made no model call
    (an idle thread's ``persist``): what subscribers see of it. The ``start``'s ``messageId`` is
    ``persisted-signal:<signal id>``, as Mastra's (no assistant message comes of it)."""
    echo = echo_chunk(signal)
    echo["from"] = FROM_AGENT
    chunks: list[ChunkBody] = [
        start_chunk(agent_id, f"persisted-signal:{signal['id']}"), echo,
        finish_chunk("stop", finish_reason="stop", usage={"inputTokens": 0, "outputTokens": 0, "totalTokens": 0})]
    for i, c in enumerate(chunks):
        envelope(c, run_id=run_id, step=0, attempt=1, seq=i)
    return chunks


def nested_chunk(chunk: Mapping[str, object], target: Mapping[str, object]) -> dict[str, object]:
    """A child's stamped chunk as the parent thread's subscribers get it (decision 78): Mastra's
    ``tool-output`` ``{output: <the child's chunk>, toolCallId, toolName}``, with the child's own
    ``runId`` / ``step`` / ``attempt`` / ``seq`` on the envelope, so a subscriber drops a duplicate
    by ``(runId, seq)`` as it does for any chunk and the child's stream rules hold on this copy too."""
    return {"type": "tool-output", "runId": chunk.get("runId"), "step": chunk.get("step"),
            "attempt": chunk.get("attempt"), "seq": chunk.get("seq"), "from": FROM_AGENT,
            "payload": {"output": dict(chunk), "toolCallId": target.get("tool_call_id"),
                        "toolName": target.get("tool_name"), "parentRunId": target.get("run_id")}}
