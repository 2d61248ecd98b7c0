"""Mastra chunks as the Vercel AI SDK's UI message stream (pure functions; decision 136).

What ``@mastra/ai-sdk``'s ``chatRoute`` sends ``useChat``: one SSE event ``data: <json>`` per UI
message chunk, ``data: [DONE]`` at the end, and the header ``x-vercel-ai-ui-message-stream: v1``.
A Mastra chunk ``{type, payload}`` becomes at most a few UI chunks, as its ``toAISdkStream``
turns them (AI SDK v5 names, which v6 and v7 readers take as well):

========================================  ===================================================
Mastra chunk                              UI message chunk
========================================  ===================================================
``start``                                 ``start`` ``{messageId?}``
``step-start`` / ``step-finish``          ``start-step`` / ``finish-step``
``text-start|delta|end``                  ``text-start|delta|end`` ``{id, delta}``
``reasoning-start|delta|end``             the same, only with ``send_reasoning``
``tool-call-input-streaming-start``       ``tool-input-start`` ``{toolCallId, toolName, dynamic}``
``tool-call-delta``                       ``tool-input-delta`` ``{toolCallId, inputTextDelta}``
``tool-call``                             ``tool-input-available`` ``{toolCallId, toolName, input}``
``tool-result`` / ``tool-error``          ``tool-output-available`` / ``tool-output-error``
``tool-output`` holding a ``data-*``      that ``data-*`` chunk (a tool's ``writer.custom``)
``data-*``                                ``{type, data, id?, transient?}``
``tripwire``                              ``data-tripwire`` ``{reason, retry, metadata, processorId}``
``object-result``                         ``data-structured-output`` ``{object}``
``error``                                 ``error`` ``{errorText}``
``abort``                                 ``abort``
``finish``                                ``finish`` ``{finishReason}`` (``tripwire``/``retry``: ``other``)
========================================  ===================================================

Other chunks (``tool-call-input-streaming-end``, sources unless ``send_sources``, Threadline's
``attempt-discarded``) make none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from threadline.events.chunk_types import ChunkKind, is_data_kind

HEADERS = {"x-vercel-ai-ui-message-stream": "v1", "Cache-Control": "no-cache, no-store", "X-Accel-Buffering": "no"}
"""The response headers of a UI message stream (``createUIMessageStreamResponse``'s)."""
FINISH_REASONS = frozenset({"stop", "length", "content-filter", "tool-calls", "error", "other"})
"""The AI SDK's finish reasons; Mastra's own (``tripwire``, ``retry``…) are sent as ``other``."""

UiChunk = dict[str, Any]


@dataclass(frozen=True)
class UiOptions:
    """``chatRoute``'s switches: reasoning and sources are left out unless asked for (its
    defaults); ``message_id`` names the answer (the last assistant message's id, when the
    request ends with one), else the ``start`` chunk's own ``messageId``."""

    send_reasoning: bool = False
    send_sources: bool = False
    message_id: str | None = None


def sse(chunk: Mapping[str, Any]) -> bytes:
    """One UI chunk as the SSE event the AI SDK's reader parses."""
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def error_text(error: object) -> str:
    """``errorText`` of a Mastra error payload: a string as it is, an object as its JSON
    (``safeParseErrorObject``'s way)."""
    if isinstance(error, str):
        return error
    try:
        text = orjson.dumps(error).decode()
    except TypeError:
        return str(error)
    return str(error) if text in ("{}", "null") else text


def _given(**fields: Any) -> UiChunk:
    return {k: v for k, v in fields.items() if v is not None}


def _data(chunk: Mapping[str, Any]) -> UiChunk:
    return _given(type=chunk["type"], id=chunk.get("id"), data=chunk.get("data"), transient=chunk.get("transient"))


def _tool(kind: str, p: Mapping[str, Any]) -> list[UiChunk]:
    if kind == ChunkKind.TOOL_CALL_INPUT_STREAMING_START:
        return [_given(type="tool-input-start", toolCallId=p.get("toolCallId"), toolName=p.get("toolName"),
                       dynamic=bool(p.get("dynamic")), providerExecuted=p.get("providerExecuted"))]
    if kind == ChunkKind.TOOL_CALL_DELTA:
        return [{"type": "tool-input-delta", "toolCallId": p.get("toolCallId"),
                 "inputTextDelta": p.get("argsTextDelta") or ""}]
    if kind == ChunkKind.TOOL_CALL:
        return [_given(type="tool-input-available", toolCallId=p.get("toolCallId"), toolName=p.get("toolName"),
                       input=p.get("args", {}), providerExecuted=p.get("providerExecuted"))]
    if kind == ChunkKind.TOOL_RESULT:
        return [_given(type="tool-output-available", toolCallId=p.get("toolCallId"), output=p.get("result"),
                       providerExecuted=p.get("providerExecuted"))]
    if kind == ChunkKind.TOOL_ERROR:
        return [{"type": "tool-output-error", "toolCallId": p.get("toolCallId"), "errorText": error_text(p.get("error"))}]
    if kind == ChunkKind.TOOL_OUTPUT:
        inner = p.get("output")
        while isinstance(inner, Mapping) and inner.get("type") == ChunkKind.TOOL_OUTPUT:  # a sub-agent's, nested
            inner = (inner.get("payload") or {}).get("output")
        if isinstance(inner, Mapping) and isinstance(inner.get("type"), str) and is_data_kind(inner["type"]):
            return [_data(inner)]
    return []


def _text(kind: str, p: Mapping[str, Any], options: UiOptions) -> list[UiChunk]:
    if kind.startswith("reasoning-") and not options.send_reasoning:
        return []
    out = _given(type=kind, id=p.get("id"), providerMetadata=p.get("providerMetadata"))
    if kind.endswith("-delta"):
        out["delta"] = p.get("text") or ""
    return [out]


def _finish(p: Mapping[str, Any]) -> UiChunk:
    reason = "tripwire" if p.get("tripwire") else (p.get("stepResult") or {}).get("reason")
    return _given(type="finish", finishReason=(reason if reason in FINISH_REASONS else "other") if reason else None)


def ui_chunks(chunk: Mapping[str, Any], options: UiOptions) -> list[UiChunk]:
    """The UI message chunks of one Mastra chunk (see the module's table); ``[]`` for none."""
    kind = chunk.get("type")
    p: Mapping[str, Any] = chunk.get("payload") or {}
    if not isinstance(kind, str):
        return []
    if kind in (ChunkKind.TEXT_START, ChunkKind.TEXT_DELTA, ChunkKind.TEXT_END, ChunkKind.REASONING_START,
                ChunkKind.REASONING_DELTA, ChunkKind.REASONING_END):
        return _text(kind, p, options)
    if kind == ChunkKind.START:
        return [_given(type="start", messageId=options.message_id or p.get("messageId"))]
    if kind in (ChunkKind.STEP_START, ChunkKind.STEP_FINISH):
        return [{"type": "start-step" if kind == ChunkKind.STEP_START else "finish-step"}]
    if kind == ChunkKind.FINISH:
        return [_finish(p)]
    if kind == ChunkKind.ERROR:
        return [{"type": "error", "errorText": error_text(p.get("error", chunk.get("error")))}]
    if kind == ChunkKind.ABORT:
        return [{"type": "abort"}]
    if kind == ChunkKind.TRIPWIRE:
        return [{"type": "data-tripwire", "data": _given(reason=p.get("reason"), retry=p.get("retry"),
                                                         metadata=p.get("metadata"), processorId=p.get("processorId"))}]
    if kind == ChunkKind.OBJECT_RESULT:
        return [{"type": "data-structured-output", "data": {"object": chunk.get("object", p.get("object"))}}]
    if kind == "source" and options.send_sources and p.get("sourceType") == "url":
        return [_given(type="source-url", sourceId=p.get("id"), url=p.get("url"), title=p.get("title"))]
    if is_data_kind(kind):
        return [_data(chunk)]
    return _tool(kind, p)
