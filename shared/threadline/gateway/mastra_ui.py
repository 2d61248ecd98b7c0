"""Stored messages as the AI SDK's UI messages, as Mastra's memory answers ``uiMessages``
(``MessageList.get.all.aiV5.ui()``, decision 157): pure functions of the stored
``MastraDBMessage`` shape (:func:`threadline.gateway.mastra_shapes.message_shape`'s).

A UI message is ``{id, role, metadata, parts}``: ``metadata`` the stored message's metadata
with its ``createdAt``, ``threadId`` and ``resourceId``; parts as the AI SDK 5 names them —
``text``, ``reasoning`` (``state: "done"``), ``tool-<name>`` (``toolCallId``, ``input``,
``state`` ``output-available`` with ``output``, ``output-error`` with ``errorText``, or
``input-available``), ``file`` (``url``, ``mediaType``), and ``step-start``, ``data-*`` and
``error`` parts as stored. A signal that is not a user message becomes a ``system`` message
holding one ``data-signal`` part; a user-message signal is a ``user`` message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

USER_SIGNALS = ("user", "user-message")


def _created(part: Mapping[str, Any]) -> dict[str, Any]:
    """``providerMetadata`` with Mastra's ``mastra.createdAt`` of the part, when it has one."""
    meta = dict(part.get("providerMetadata") or {})
    if part.get("createdAt") is not None:
        meta["mastra"] = {**(meta.get("mastra") or {}), "createdAt": part["createdAt"]}
    return {"providerMetadata": meta} if meta else {}


def tool_part(part: Mapping[str, Any]) -> dict[str, Any]:
    """A stored ``tool-invocation`` part as the AI SDK's ``tool-<name>`` part."""
    inv = part.get("toolInvocation") or {}
    out: dict[str, Any] = {"type": f"tool-{inv.get('toolName')}", "toolCallId": inv.get("toolCallId"),
                           "input": inv.get("args")}
    state = inv.get("state")
    if state == "result":
        out.update(state="output-available", output=inv.get("result"))
    elif state == "output-error":
        out.update(state="output-error", errorText=inv.get("errorText") or "")
    else:
        out["state"] = "input-available"
    return {**out, **_created(part)}


def _file_part(part: Mapping[str, Any]) -> dict[str, Any]:
    data, media = str(part.get("data") or ""), part.get("mimeType") or part.get("mediaType") or "image/png"
    url = data if data.startswith(("http://", "https://", "data:")) else f"data:{media};base64,{data}"
    named = {"filename": part["filename"]} if part.get("filename") else {}
    return {"type": "file", "url": url, "mediaType": media, **named, **_created(part)}


def ui_parts(content: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The UI parts of a stored message's ``content`` (``{format: 2, parts, content?}``)."""
    parts: list[dict[str, Any]] = []
    said = False  # a part other than a tool call or reasoning: the legacy ``content`` text is then not added
    for part in content.get("parts") or ():
        if not isinstance(part, dict):
            continue
        kind = str(part.get("type"))
        if kind == "tool-invocation":
            parts.append(tool_part(part))
        elif kind == "reasoning":
            text = part.get("reasoning") or "".join(str(d.get("text") or "") for d in part.get("details") or ()
                                                    if isinstance(d, dict) and d.get("type") == "text")
            if text or part.get("details"):
                parts.append({"type": "reasoning", "text": text, "state": "done", **_created(part)})
        elif kind == "file":
            parts.append(_file_part(part))
        elif kind == "text":
            parts.append({"type": "text", "text": part.get("text", ""), **_created(part)})
            said = True
        elif not kind.startswith("tool-") and kind != "source-document":
            parts.append(dict(part))
            said = True
    if isinstance(content.get("content"), str) and content["content"] and not said:
        parts.append({"type": "text", "text": content["content"]})
    return parts


def _signal_part(message: Mapping[str, Any], signal: Mapping[str, Any], kind: str) -> dict[str, Any]:
    text = next((p.get("text") for p in (message["content"].get("parts") or ())
                 if isinstance(p, dict) and p.get("type") == "text"), "")
    data: dict[str, Any] = {"id": signal.get("id") or message["id"], "type": kind,
                            "tagName": signal.get("tagName") or kind,
                            "contents": signal.get("contents", text),
                            "createdAt": signal.get("createdAt") or message.get("createdAt")}
    data.update({k: signal[k] for k in ("acceptedAt", "attributes", "metadata") if signal.get(k)})
    return {"type": "data-signal", "data": data}


def ui_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """One stored message (``{id, role, createdAt, threadId, resourceId, type, content}``) as a
    UI message ``{id, role, metadata, parts}``."""
    content = message.get("content") or {}
    metadata = dict(content.get("metadata") or {})
    metadata.update({k: message[k] for k in ("createdAt", "threadId", "resourceId") if message.get(k)})
    role = message.get("role")
    if role == "signal":
        found = metadata.get("signal")
        signal: dict[str, Any] = found if isinstance(found, dict) else {}
        kind = str(signal.get("type") or message.get("type") or "signal")
        if kind not in USER_SIGNALS:
            return {"id": message["id"], "role": "system", "metadata": metadata,
                    "parts": [_signal_part(message, signal, kind)]}
        role = "user"
    return {"id": message["id"], "role": role, "metadata": metadata, "parts": ui_parts(content)}


def ui_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`ui_message` of each stored message, in order."""
    return [ui_message(m) for m in messages]
