"""The prompt of ``process_llm_request`` in Mastra's shape, and back (docs/processors.md).

Threadline hands ``process_llm_request`` the prompt as it is sent: OpenAI chat messages
(``{"role", "content", "tool_calls"?}``, ``{"role": "tool", "tool_call_id", "content"}``).
Mastra hands its ``processLLMRequest`` the AI SDK's prompt: every non-system message's
``content`` a list of parts — ``{"type": "text", "text"}``, ``{"type": "tool-call",
"toolCallId", "toolName", "input"}``, ``{"type": "tool-result", "toolCallId", "toolName",
"output": {"type": "text" | "json", "value"}}``, ``{"type": "file", "data", "mediaType"}``.

:func:`to_mastra` gives a processor written against Mastra's shape the prompt it expects; a
``{"prompt": ...}`` it returns may be in either shape: the step reads it with :func:`to_chat`,
which converts the messages in Mastra's shape and keeps the others as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

_MASTRA_PARTS = frozenset({"tool-call", "tool-result", "file", "reasoning"})


def to_mastra(prompt: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages → the AI SDK's prompt (a new list; ``prompt`` is not modified). Tool
    results are ``json`` outputs when their content parses as JSON, else ``text``."""
    names = {c["id"]: c["function"]["name"] for m in prompt for c in m.get("tool_calls") or ()
             if isinstance(c, Mapping) and isinstance(c.get("function"), Mapping)}
    out: list[dict[str, Any]] = []
    for m in prompt:
        role, content = m.get("role"), m.get("content")
        if role == "system":
            out.append({"role": "system", "content": content if isinstance(content, str) else _text_of(content)})
        elif role == "tool":
            call_id = m.get("tool_call_id")
            out.append({"role": "tool", "content": [{"type": "tool-result", "toolCallId": call_id,
                                                     "toolName": names.get(call_id, ""), "output": _output(content)}]})
        elif role == "assistant":
            parts = _content_parts(content)
            for call in m.get("tool_calls") or ():
                fn = call.get("function") or {}
                parts.append({"type": "tool-call", "toolCallId": call.get("id"), "toolName": fn.get("name"),
                              "input": _json_or_text(fn.get("arguments"))})
            out.append({"role": "assistant", "content": parts})
        else:
            out.append({"role": role, "content": _content_parts(content)})
    return out


def to_chat(prompt: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The prompt as chat messages: each message in Mastra's shape converted (:func:`to_mastra`'s
    inverse), each chat message kept as it is (the same object)."""
    out: list[dict[str, Any]] = []
    for m in prompt:
        if not is_mastra_message(m):
            out.append(m)  # type: ignore[arg-type]  # a chat message, passed on as the processor gave it
            continue
        role, parts = m.get("role"), m.get("content") or []
        if role == "tool":
            out.extend({"role": "tool", "tool_call_id": p.get("toolCallId"), "content": _result_text(p.get("output"))}
                       for p in parts if p.get("type") == "tool-result")
        elif role == "assistant":
            text = "".join(p.get("text") or "" for p in parts if p.get("type") == "text")
            calls = [{"id": p.get("toolCallId"), "type": "function", "function": {
                "name": p.get("toolName"), "arguments": _as_json(p.get("input"))}} for p in parts
                if p.get("type") == "tool-call"]
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
        else:
            out.append({"role": role, "content": [_chat_block(p) for p in parts if p.get("type") != "reasoning"]})
    return out


def is_mastra_message(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is in Mastra's shape: its content holds a part only Mastra's shape
    has (``tool-call``, ``tool-result``, ``file``, ``reasoning``), or it is a tool message whose
    content is a list."""
    content = message.get("content")
    if not isinstance(content, list):
        return False
    if message.get("role") == "tool":
        return True
    return any(isinstance(p, Mapping) and p.get("type") in _MASTRA_PARTS for p in content)


def _content_parts(content: object) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    parts: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else ():
        if block.get("type") == "text":
            parts.append({"type": "text", "text": block.get("text") or ""})
        elif block.get("type") == "image_url":
            url = (block.get("image_url") or {}).get("url")
            media = url.split(";", 1)[0][5:] if isinstance(url, str) and url.startswith("data:") else "image/*"
            parts.append({"type": "file", "data": url, "mediaType": media})
        else:
            parts.append(dict(block))
    return parts


def _chat_block(part: Mapping[str, Any]) -> dict[str, Any]:
    if part.get("type") == "file" and str(part.get("mediaType") or "").startswith("image/"):
        return {"type": "image_url", "image_url": {"url": part.get("data")}}
    return dict(part)


def _text_of(content: object) -> str:
    return "".join(b.get("text") or "" for b in content if isinstance(b, Mapping)) if isinstance(content, list) else ""


def _output(content: object) -> dict[str, Any]:
    value = _json_or_text(content)
    return {"type": "text", "value": value} if isinstance(value, str) else {"type": "json", "value": value}


def _json_or_text(text: object) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _as_json(value: object) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _result_text(output: object) -> str:
    if isinstance(output, Mapping) and "value" in output:
        value = output["value"]
        return value if output.get("type") in ("text", "error-text") and isinstance(value, str) else _as_json(value)
    return _as_json(output)
