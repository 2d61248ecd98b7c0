"""The stored message shape (Mastra's ``MastraDBMessage``, format 2) and its timestamps.

A message is ``{id, role, createdAt, threadId?, resourceId?, type?, content: {format: 2, parts,
metadata?}}``; :func:`make_message` builds one as an :class:`~threadline._internal.attrdict.AttrDict`
so processors can read ``msg.content.parts`` as well as ``msg["content"]["parts"]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from threadline._internal.attrdict import AttrDict, wrap
from threadline.ids import new_id


def now_iso() -> str:
    """The current UTC time as ISO 8601 with a ``Z`` suffix (``createdAt`` of messages and signals)."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def now_ms() -> int:
    """The current time in milliseconds since the epoch (``createdAt`` of stored parts, as Mastra's)."""
    return int(datetime.now(UTC).timestamp() * 1000)


def as_stored(msg: Mapping[str, Any], at_ms: int) -> None:
    """Give ``msg`` Mastra's stored shape, in place: ``createdAt`` (``at_ms``, epoch milliseconds)
    on each part that has none, but tool invocations (Mastra stamps none); ``content.content``, the
    text of its ``text`` parts, on an assistant message and on a user message that is not a
    signal's (when it has text; signals keep theirs in the parts only)."""
    content = msg["content"]
    for part in content.get("parts") or ():
        if part.get("type") != "tool-invocation" and "createdAt" not in part:
            part["createdAt"] = at_ms
    signal = (content.get("metadata") or {}).get("signal")
    if msg["role"] == "assistant" or (msg["role"] == "user" and not signal):
        text = "".join(p.get("text", "") for p in content.get("parts") or ()
                       if p.get("type") == "text" and isinstance(p.get("text"), str))
        if text:
            content["content"] = text


def is_user_authored(msg: Mapping[str, Any]) -> bool:
    """A message the user wrote: role ``user``, or a ``signal`` of type ``user`` (``sendMessage``,
    ``queueMessage``), as Mastra's ``isUserAuthoredMessage``."""
    if msg.get("role") == "user":
        return True
    meta = ((msg.get("content") or {}).get("metadata") or {}) if isinstance(msg.get("content"), Mapping) else {}
    return msg.get("role") == "signal" and (meta.get("signal") or {}).get("type") == "user"


def make_message(role: str, parts: Sequence[Mapping[str, object]], *, id: str | None = None,
                 thread_id: str | None = None, resource_id: str | None = None,
                 metadata: Mapping[str, object] | None = None, type: str | None = None) -> AttrDict:
    """Build a ``MastraDBMessage`` (format 2); ``id`` defaults to a new ``msg_…`` id."""
    content: dict[str, Any] = {"format": 2, "parts": parts}
    if metadata:
        content["metadata"] = metadata
    msg: dict[str, Any] = {"id": id or new_id("msg"), "role": role, "createdAt": now_iso(),
                           "content": content}
    if thread_id is not None:
        msg["threadId"] = thread_id
    if resource_id is not None:
        msg["resourceId"] = resource_id
    if type is not None:
        msg["type"] = type
    result: AttrDict = wrap(msg)
    return result
