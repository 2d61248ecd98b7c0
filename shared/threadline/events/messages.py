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
