"""Mastra's message shapes and the ``MessageList`` (docs/processors.md, "messages vs messageList").

A message is a ``MastraDBMessage``: ``{id, role, createdAt, threadId, resourceId, type?,
content: {format: 2, parts: [...], content?, metadata?}}``, held as an :class:`AttrDict` so both
``msg.content.parts`` and ``msg["content"]["parts"]`` work. Parts: ``text``, ``reasoning``,
``file``, ``step-start``, ``tool-invocation {toolInvocation: {state, toolCallId, toolName, args,
result?}}``, ``data-<name> {data}``, ``error``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import orjson

from threadline._internal.attrdict import AttrDict, wrap
from threadline.errors import ConfigurationError
from threadline.events.files import to_model_block
from threadline.events.messages import make_message, now_iso
from threadline.events.signals import render_for_model
from threadline.ids import new_id
from threadline.runtime.message_types import UIMessage
from threadline.runtime.sub_agent_names import model_output

Source = Literal["memory", "input", "response", "context"]


def text_of(message: Mapping[str, Any]) -> str:
    """Text of a message: its ``text`` parts joined, else the legacy ``content.content`` string."""
    content = message.get("content") or {}
    text = "".join(p.get("text", "") for p in content.get("parts") or ()
                   if p.get("type") == "text" and isinstance(p.get("text"), str))
    if not text and isinstance(content.get("content"), str):
        text = content["content"]
    return text


def system_text(message: Any) -> str:
    """Text of a system message given as a string, ``{role, content}`` or a DB message."""
    if isinstance(message, str):
        return message
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return text_of(message)
    return ""


class _View:
    """A filtered view of the list: ``db()``, ``ui()``, ``core()`` formats."""

    def __init__(self, owner: MessageList, sources: tuple[str, ...] | None) -> None:
        self._owner = owner
        self._sources = sources

    def db(self) -> list[AttrDict]:
        """Messages in Mastra's DB shape (the live objects: in-place edits are kept)."""
        return [m for m, s in self._owner._entries if self._sources is None or s in self._sources]

    def ui(self) -> list[UIMessage]:
        """UI messages: ``{id, role, parts, metadata?}``."""
        out = []
        for m in self.db():
            ui: UIMessage = {"id": m["id"], "role": "user" if m["role"] == "signal" else m["role"],
                  "parts": list(m["content"].get("parts") or [])}
            if m["content"].get("metadata"):
                ui["metadata"] = m["content"]["metadata"]
            out.append(ui)
        return out

    def core(self) -> list[dict[str, Any]]:
        """Provider (OpenAI chat) messages, without system messages."""
        return to_core(self.db())


class _Get:
    def __init__(self, owner: MessageList) -> None:
        self.all = _View(owner, None)
        self.input = _View(owner, ("input",))
        self.response = _View(owner, ("response",))
        self.remembered = _View(owner, ("memory",))


class MessageList:
    """The live conversation of one run (Mastra's ``MessageList``).

    Holds chat messages with their *source* (``memory`` = thread history, ``input`` = new user
    input and signals, ``response`` = what the agent produced) and the system messages (untagged,
    plus tagged buckets owned by processors). Views: ``get.all``, ``get.input``,
    ``get.response``, ``get.remembered``; formats: ``db()``, ``ui()``, ``core()``.
    """

    def __init__(self, *, thread_id: str | None = None, resource_id: str | None = None) -> None:
        self.thread_id = thread_id
        self.resource_id = resource_id
        self._entries: list[tuple[AttrDict, str]] = []
        self._system: list[AttrDict] = []  # untagged
        self._tagged: dict[str, list[AttrDict]] = {}
        self.get = _Get(self)

    # --- chat messages -------------------------------------------------------------------
    def add(self, messages: object, source: Source = "input") -> MessageList:
        """Append messages (a message, a string = user text, or a list of either)."""
        items = messages if isinstance(messages, list) else [messages]
        for item in items:
            msg = self._coerce(item)
            if msg["role"] == "system":
                self.add_system(system_text(msg))
                continue
            self.remove_by_ids([msg["id"]])
            self._entries.append((msg, source))
        return self

    def _coerce(self, item: object) -> AttrDict:
        if isinstance(item, str):
            return make_message("user", [{"type": "text", "text": item}],
                                thread_id=self.thread_id, resource_id=self.resource_id)
        if isinstance(item, dict):
            msg = wrap(dict(item)) if not isinstance(item, AttrDict) else item
            if isinstance(msg.get("content"), str):  # CoreMessage-like {role, content: str}
                msg["content"] = wrap({"format": 2, "parts": [{"type": "text", "text": msg["content"]}]})
            msg.setdefault("id", new_id("msg"))
            msg.setdefault("createdAt", now_iso())
            return msg
        raise ConfigurationError(f"cannot add {type(item).__name__} to a MessageList")

    def entries(self) -> Sequence[tuple[AttrDict, str]]:
        """The chat messages with their source (``memory``, ``input``, ``response``…), in order:
        what a step stores (the list's own entries, not a copy)."""
        return self._entries

    def source_of(self, message_id: str) -> str | None:
        """Source of the message with this id, or ``None``."""
        for m, s in self._entries:
            if m["id"] == message_id:
                return s
        return None

    def remove_by_ids(self, ids: Iterable[str]) -> list[AttrDict]:
        """Remove messages by id; return the removed ones."""
        wanted = set(ids)
        removed = [m for m, _ in self._entries if m["id"] in wanted]
        if removed:
            self._entries = [(m, s) for m, s in self._entries if m["id"] not in wanted]
        return removed

    def replace(self, message_id: str, message: Mapping[str, object]) -> bool:
        """Replace the message with ``message_id`` in place (keeps its position and source)."""
        for i, (m, s) in enumerate(self._entries):
            if m["id"] == message_id:
                new = wrap(dict(message))
                new.setdefault("id", message_id)
                self._entries[i] = (new, s)
                return True
        return False

    def get_by_id(self, message_id: str) -> AttrDict | None:
        for m, _ in self._entries:
            if m["id"] == message_id:
                return m
        return None

    def update_tool_invocation(self, part: Mapping[str, Any]) -> bool:
        """Replace the tool invocation with the same ``toolCallId`` (newest message first).

        ``part`` is ``{type: "tool-invocation", toolInvocation: {state, toolCallId, toolName,
        args, result}}``. Returns ``True`` if an invocation was found and updated.
        """
        inv = part.get("toolInvocation") or {}
        call_id = inv.get("toolCallId")
        for msg, _ in reversed(self._entries):
            for i, p in enumerate(msg["content"].get("parts") or []):
                if p.get("type") == "tool-invocation" and p["toolInvocation"].get("toolCallId") == call_id:
                    msg["content"]["parts"][i] = wrap({**p, **part,
                                                       "toolInvocation": {**p["toolInvocation"], **inv}})
                    return True
        return False

    # --- system messages -----------------------------------------------------------------
    def add_system(self, message: object, tag: str | None = None) -> MessageList:
        """Add a system message (untagged, or in the bucket ``tag``)."""
        msg = wrap({"role": "system", "content": system_text(message)} if not isinstance(message, dict)
                   else {"role": "system", "content": system_text(message),
                         **({"providerOptions": message["providerOptions"]}
                            if message.get("providerOptions") else {})})
        if tag is None:
            self._system.append(msg)
        else:
            self._tagged.setdefault(tag, []).append(msg)
        return self

    def get_system_messages(self, tag: str | None = None) -> list[AttrDict]:
        """Untagged system messages, or those of bucket ``tag``."""
        return list(self._system if tag is None else self._tagged.get(tag, []))

    def replace_all_system_messages(self, messages: Sequence[object]) -> None:
        """Replace the untagged system messages."""
        self._system = []
        for m in messages:
            self.add_system(m)

    def all_system_messages(self) -> list[AttrDict]:
        """Untagged then tagged system messages, as sent to the model."""
        out = list(self._system)
        for bucket in self._tagged.values():
            out.extend(bucket)
        return out

    # --- state -------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """JSON-ready snapshot (carried between steps in Postgres)."""
        return {"entries": [[m, s] for m, s in self._entries], "system": self._system,
                "tagged": self._tagged}

    @classmethod
    def from_state(cls, state: dict[str, Any], *, thread_id: str | None = None,
                   resource_id: str | None = None, live: bool = False) -> MessageList:
        """The list a :meth:`to_state` snapshot describes. ``live``: the snapshot is another
        list's own (``RunState.live``), whose messages are taken as they are; else they are
        wrapped (a snapshot decoded from JSON holds plain dicts)."""
        ml = cls(thread_id=thread_id, resource_id=resource_id)
        if live:
            ml._entries = [(m, s) for m, s in state.get("entries", [])]
            ml._system = list(state.get("system", []))
            ml._tagged = {k: list(v) for k, v in state.get("tagged", {}).items()}
            return ml
        ml._entries = [(wrap(m), s) for m, s in state.get("entries", [])]
        ml._system = [wrap(m) for m in state.get("system", [])]
        ml._tagged = {k: [wrap(m) for m in v] for k, v in state.get("tagged", {}).items()}
        return ml

    def __len__(self) -> int:
        return len(self._entries)


def _json(value: object) -> str:
    return value if isinstance(value, str) else orjson.dumps(value, default=str).decode()


def _user_content(msg: dict[str, Any]) -> object:
    """The text the model sees, then a content block per file part (when there are any)."""
    text = render_for_model(msg)
    files = [to_model_block(p) for p in msg["content"].get("parts") or [] if p.get("type") == "file"]
    if not files:
        return text
    return ([{"type": "text", "text": text}] if text else []) + files


def _thinking_block(part: Mapping[str, Any]) -> dict[str, Any] | None:
    """A reasoning part with Anthropic's signature as the thinking block the provider wants back
    on a later step (``None``: a reasoning part without one is not sent back)."""
    meta = part.get("providerMetadata") or {}
    signature = (meta.get("anthropic") or {}).get("signature") if isinstance(meta, Mapping) else None
    if not signature:
        signature = next((d.get("signature") for d in part.get("details") or () if isinstance(d, Mapping)
                          and d.get("signature")), None)
    if not signature:
        return None
    return {"type": "thinking", "thinking": part.get("reasoning") or "", "signature": signature}


def to_core(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mastra DB messages → OpenAI chat messages (tool calls and tool results split out).

    Signal messages (role ``signal``) become user messages rendered as XML (Mastra's Agent API);
    a message or signal sent with ``providerOptions`` keeps them on its user message; file parts
    become content blocks after the text (:func:`threadline.events.files.to_model_block`). An
    assistant message with tool calls and no text has ``content: None``; a tool's error is sent
    as its bare text and a sub-agent's result as its answer's text, as Mastra sends them; a
    reasoning part signed by Anthropic goes back as the turn's ``thinking_blocks``.
    """
    out: list[dict[str, Any]] = []
    for msg in messages:
        role = msg["role"]
        if role in ("user", "signal"):
            user: dict[str, Any] = {"role": "user", "content": _user_content(msg)}
            options = msg["content"].get("providerMetadata") or (  # older rows: in the signal's metadata
                ((msg["content"].get("metadata") or {}).get("signal") or {}).get("providerOptions"))
            if options:  # sent by threadline.runtime.model.provider_options.prepare_messages
                user["providerOptions"] = options
            out.append(user)
        elif role == "assistant":
            out.extend(_assistant_turns(msg))
    return out


def user_first(prompt: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``prompt`` (chat messages, system ones first) with a user message ``.`` before its first
    other message when that one is the assistant's (a ``lastMessages`` cut can start there), as
    Mastra's prompt has it: some providers refuse a conversation that does not start with the user."""
    first = next((i for i, m in enumerate(prompt) if m.get("role") != "system"), None)
    if first is not None and prompt[first].get("role") == "assistant":
        return [*prompt[:first], {"role": "user", "content": "."}, *prompt[first:]]
    return prompt


def _assistant_turns(msg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One assistant message's chat messages: per step, the assistant turn (text, tool calls,
    signed thinking blocks), then its tool results."""
    out: list[dict[str, Any]] = []
    parts = msg["content"].get("parts") or []
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    thinking: list[dict[str, Any]] = []

    def flush() -> None:
        if text or calls:
            entry: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
            if calls:
                entry["tool_calls"] = list(calls)
            if thinking:  # litellm sends them as the assistant turn's signed thinking blocks
                entry["thinking_blocks"] = list(thinking)
            out.append(entry)
            out.extend(results)
        for kept in (text, calls, results, thinking):
            kept.clear()

    for p in parts:
        kind = p.get("type")
        if kind == "step-start":
            flush()
        elif kind == "text":
            text.append(p.get("text") or "")
        elif kind == "reasoning" and (block := _thinking_block(p)) is not None:
            thinking.append(block)
        elif kind == "tool-invocation":
            inv = p["toolInvocation"]
            state = inv.get("state")
            if state not in ("result", "output-error", "output-denied"):
                continue  # incomplete calls are never sent back
            calls.append({"id": inv["toolCallId"], "type": "function",
                          "function": {"name": inv["toolName"], "arguments": _json(inv.get("args") or {})}})
            if state == "result":
                result = model_output(inv["toolName"], inv.get("result"), p.get("providerMetadata"))
            elif state == "output-denied":  # a declined call: the decline's reason, as Mastra's
                result = str((inv.get("approval") or {}).get("reason") or "")
            else:  # an error: its bare text, as Mastra's
                result = str(inv.get("errorText") or "")
            results.append({"role": "tool", "tool_call_id": inv["toolCallId"], "content": _json(result)})
    if not parts and isinstance(msg["content"].get("content"), str):
        text.append(msg["content"]["content"])
    flush()
    return out
