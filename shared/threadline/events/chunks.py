"""The chunk envelope of the per-thread chunk topics (invariant 5, docs/decisions.md §15).

Hot path note: workers build chunk dicts directly and encode them with orjson; this model is the
published schema and what subscribers may validate against. In the process, each kind's body is a
``TypedDict`` (:mod:`threadline.events.chunk_types`): the builders below return them.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    ObjectChunk,
    StartChunk,
    StepFinishChunk,
    StepFinishPayload,
    StepOutput,
    StepStartChunk,
    StepStartPayload,
    ToolErrorChunk,
    ToolResultChunk,
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
    """A step's first chunk; ``started_at_ms`` is absent on a replayed (cached) response."""
    payload: StepStartPayload = {"messageId": message_id}
    if started_at_ms is not None:
        payload["startedAt"] = started_at_ms
    return {"type": ChunkKind.STEP_START, "from": FROM_AGENT, "payload": payload}


def step_finish_chunk(message_id: str, *, reason: str | None, is_continued: bool, text: str | None,
                      usage: Usage | None, has_text: bool = True, model: str | None = None) -> StepFinishChunk:
    """A step's last chunk: ``stepResult {reason, isContinued}``, ``output {text?, usage}``
    (``has_text=False`` leaves ``output.text`` out, as on a failed step) and, when ``model`` (the
    litellm string of the model that answered, e.g. ``openai/gpt-4o``) is given, ``metadata
    {modelId, modelProvider}`` (``gpt-4o``, ``openai``) as in Mastra."""
    output: StepOutput = {"text": text, "usage": usage} if has_text else {"usage": usage}
    payload: StepFinishPayload = {"messageId": message_id, "stepResult": {"reason": reason, "isContinued": is_continued},
                                  "output": output}
    if model:
        provider, _, model_id = model.rpartition("/")
        payload["metadata"] = {"modelId": model_id, "modelProvider": provider.split("/", 1)[0] or None}
    return {"type": ChunkKind.STEP_FINISH, "from": FROM_AGENT, "payload": payload}


def finish_chunk(reason: str, *, finish_reason: str, usage: Usage | None = None,
                 with_output: bool = True, tripwire: JsonObject | None = None) -> FinishChunk:
    """A run's last chunk: ``stepResult.reason``, ``finishReason``, ``output.usage`` (left out
    when ``with_output`` is False) and the ``tripwire`` that ended it, if any."""
    payload: FinishPayload = {"stepResult": {"reason": reason}, "finishReason": finish_reason}
    if with_output:
        payload["output"] = {"usage": usage}
    if tripwire is not None:
        payload["tripwire"] = tripwire
    return {"type": ChunkKind.FINISH, "from": FROM_AGENT, "payload": payload}


def object_chunk(obj: JsonValue, *, final: bool = False) -> ObjectChunk:
    """Structured output: ``object`` (the object so far) or ``object-result`` (the validated
    object); as in Mastra, the object is at the top level (``{type, from, object}``, no payload)."""
    return {"type": ChunkKind.OBJECT_RESULT if final else ChunkKind.OBJECT, "from": FROM_AGENT, "object": obj}


def error_chunk(error: JsonObject) -> ErrorChunk:
    """The error that ends a run (``{kind, message, ...}``)."""
    return {"type": ChunkKind.ERROR, "from": FROM_AGENT, "payload": {"error": error}}


def tripwire_chunk(tripwire: JsonObject) -> TripwireChunk:
    """A processor blocked the run."""
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


def tool_result_chunk(call_id: str, tool_name: str, args: JsonValue, result: JsonValue) -> ToolResultChunk:
    """A tool's (final) result."""
    return {"type": ChunkKind.TOOL_RESULT, "from": FROM_AGENT,
            "payload": {"toolCallId": call_id, "toolName": tool_name, "args": args, "result": result}}


def tool_error_chunk(call_id: str, tool_name: str, args: JsonValue, error: str) -> ToolErrorChunk:
    """A tool's error."""
    return {"type": ChunkKind.TOOL_ERROR, "from": FROM_AGENT,
            "payload": {"toolCallId": call_id, "toolName": tool_name, "args": args, "error": error}}


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
    """``abort`` then ``finish {stepResult.reason: "abort"}``: how an aborted run ends."""
    return [{"type": ChunkKind.ABORT, "from": FROM_AGENT, "payload": {}},
            finish_chunk("abort", finish_reason="abort", with_output=False)]


def synthetic_run_chunks(signal: Mapping[str, Any], *, agent_id: str, run_id: str) -> list[ChunkBody]:
    """``start``, the signal's echo and ``finish``, stamped, of a run that made no model call
    (an idle thread's ``persist``): what subscribers see of it."""
    echo = echo_chunk(signal)
    echo["from"] = FROM_AGENT
    chunks: list[ChunkBody] = [
        start_chunk(agent_id, signal["id"]), echo,
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
