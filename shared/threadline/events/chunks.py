"""The chunk envelope of the per-thread chunk topics (invariant 5, docs/decisions.md §15).

Hot path note: workers build chunk dicts directly and encode them with orjson; this model is the
published schema and what subscribers may validate against.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

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

FROM_AGENT = "AGENT"
"""The ``from`` field of every chunk a run writes."""
CHUNK_HEADERS: list[tuple[str, bytes]] = [("tl-type", b"chunk")]


def chunk_headers() -> list[tuple[str, bytes]]:
    """The headers of a chunk record: :data:`CHUNK_HEADERS`, and the current trace context
    (``traceparent``) when tracing is on (``threadline.ops.tracing``)."""
    return CHUNK_HEADERS + tracing.current_headers()
"""Kafka headers of every chunk record."""


def envelope(body: dict[str, Any], *, run_id: str, step: int, attempt: int, seq: int) -> dict[str, Any]:
    """Stamp ``body`` in place with the addressing fields (``runId``, ``step``, ``attempt``,
    ``seq``); returns it."""
    body["runId"] = run_id
    body["step"] = step
    body["attempt"] = attempt
    body["seq"] = seq
    return body


def agent_chunk(kind: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{type: kind, from: "AGENT", payload}`` (``payload`` defaults to ``{}``)."""
    return {"type": kind, "from": FROM_AGENT, "payload": {} if payload is None else payload}


def start_chunk(agent_id: str, message_id: str) -> dict[str, Any]:
    """A run's first chunk."""
    return agent_chunk("start", {"id": agent_id, "messageId": message_id})


def step_start_chunk(message_id: str, *, started_at_ms: int | None) -> dict[str, Any]:
    """A step's first chunk; ``started_at_ms`` is absent on a replayed (cached) response."""
    payload: dict[str, Any] = {"messageId": message_id}
    if started_at_ms is not None:
        payload["startedAt"] = started_at_ms
    return agent_chunk("step-start", payload)


def step_finish_chunk(message_id: str, *, reason: str | None, is_continued: bool, text: str | None,
                      usage: dict[str, Any] | None, has_text: bool = True, model: str | None = None) -> dict[str, Any]:
    """A step's last chunk: ``stepResult {reason, isContinued}``, ``output {text?, usage}``
    (``has_text=False`` leaves ``output.text`` out, as on a failed step) and, when ``model`` (the
    litellm string of the model that answered, e.g. ``openai/gpt-4o``) is given, ``metadata
    {modelId, modelProvider}`` (``gpt-4o``, ``openai``) as in Mastra."""
    output: dict[str, Any] = {"text": text, "usage": usage} if has_text else {"usage": usage}
    payload: dict[str, Any] = {"messageId": message_id, "stepResult": {"reason": reason, "isContinued": is_continued},
                               "output": output}
    if model:
        provider, _, model_id = model.rpartition("/")
        payload["metadata"] = {"modelId": model_id, "modelProvider": provider.split("/", 1)[0] or None}
    return agent_chunk("step-finish", payload)


def finish_chunk(reason: str, *, finish_reason: str, usage: dict[str, Any] | None = None,
                 with_output: bool = True, tripwire: dict[str, Any] | None = None) -> dict[str, Any]:
    """A run's last chunk: ``stepResult.reason``, ``finishReason``, ``output.usage`` (left out
    when ``with_output`` is False) and the ``tripwire`` that ended it, if any."""
    payload: dict[str, Any] = {"stepResult": {"reason": reason}, "finishReason": finish_reason}
    if with_output:
        payload["output"] = {"usage": usage}
    if tripwire is not None:
        payload["tripwire"] = tripwire
    return agent_chunk("finish", payload)


def object_chunk(obj: Any, *, final: bool = False) -> dict[str, Any]:
    """Structured output: ``object`` (the object so far) or ``object-result`` (the validated
    object); as in Mastra, the object is at the top level (``{type, from, object}``, no payload)."""
    return {"type": "object-result" if final else "object", "from": FROM_AGENT, "object": obj}


def error_chunk(error: dict[str, Any]) -> dict[str, Any]:
    """The error that ends a run (``{kind, message, ...}``)."""
    return agent_chunk("error", {"error": error})


def tripwire_chunk(tripwire: dict[str, Any]) -> dict[str, Any]:
    """A processor blocked the run."""
    return agent_chunk("tripwire", tripwire)


def attempt_discarded_chunk(step: int, attempt: int, reason: str,
                            retry: dict[str, Any] | None = None) -> dict[str, Any]:
    """Subscribers drop the chunks of ``attempt`` of ``step`` (it died or was retried).

    ``retry`` (a processor asked for the retry): ``{retryProcessorId, retryReason,
    retryMetadata}``, merged into the payload so a subscriber can say why the text it saw was
    withdrawn.
    """
    return agent_chunk("attempt-discarded", {"step": step, "attempt": attempt, "reason": reason, **(retry or {})})


def tool_result_chunk(call_id: str, tool_name: str, args: Any, result: Any) -> dict[str, Any]:
    """A tool's (final) result."""
    return agent_chunk("tool-result", {"toolCallId": call_id, "toolName": tool_name, "args": args,
                                       "result": result})


def tool_error_chunk(call_id: str, tool_name: str, args: Any, error: str) -> dict[str, Any]:
    """A tool's error."""
    return agent_chunk("tool-error", {"toolCallId": call_id, "toolName": tool_name, "args": args,
                                      "error": error})


def echo_chunk(signal: dict[str, Any]) -> dict[str, Any]:
    """The stream echo of a delivered signal: ``data-user-message`` for user signals, else
    ``data-signal``; ``data`` holds its non-empty fields, always ``contents``."""
    kind = "data-user-message" if signal["type"] == "user" else "data-signal"
    data = {k: signal[k] for k in ("id", "type", "tagName", "contents", "createdAt", "attributes",
                                   "metadata") if k in signal and signal[k] not in (None, {}, [])}
    data.setdefault("contents", signal.get("contents", ""))
    return {"type": kind, "data": data, "transient": True}


def abort_chunks() -> list[dict[str, Any]]:
    """``abort`` then ``finish {stepResult.reason: "abort"}``: how an aborted run ends."""
    return [agent_chunk("abort"), finish_chunk("abort", finish_reason="abort", with_output=False)]


def synthetic_run_chunks(signal: dict[str, Any], *, agent_id: str, run_id: str) -> list[dict[str, Any]]:
    """``start``, the signal's echo and ``finish``, stamped, of a run that made no model call
    (an idle thread's ``persist``): what subscribers see of it."""
    chunks = [start_chunk(agent_id, signal["id"]), {"from": FROM_AGENT, **echo_chunk(signal)},
              finish_chunk("stop", finish_reason="stop",
                           usage={"inputTokens": 0, "outputTokens": 0, "totalTokens": 0})]
    return [envelope(c, run_id=run_id, step=0, attempt=1, seq=i) for i, c in enumerate(chunks)]


def nested_chunk(chunk: Mapping[str, Any], target: Mapping[str, Any]) -> dict[str, Any]:
    """A child's stamped chunk as the parent thread's subscribers get it (decision 78): Mastra's
    ``tool-output`` ``{output: <the child's chunk>, toolCallId, toolName}``, with the child's own
    ``runId`` / ``step`` / ``attempt`` / ``seq`` on the envelope, so a subscriber drops a duplicate
    by ``(runId, seq)`` as it does for any chunk and the child's stream rules hold on this copy too."""
    return {"type": "tool-output", "runId": chunk.get("runId"), "step": chunk.get("step"),
            "attempt": chunk.get("attempt"), "seq": chunk.get("seq"), "from": "AGENT",
            "payload": {"output": dict(chunk), "toolCallId": target.get("tool_call_id"),
                        "toolName": target.get("tool_name"), "parentRunId": target.get("run_id")}}
