"""Rebuild a thread's transcript from its chunks (a live stream, or a replay from offset 0) by the
documented replay rule (docs/decisions.md, "The replay rule"), so that it equals the stored thread:

* a user message is a ``data-user-message`` echo: id ``data.id`` (the stored message's id and the
  ``accepted`` reply's ``signal_id``), text the text of ``data.contents``;
* an assistant message is what a run's *kept* attempts streamed under one ``messageId`` (from
  ``start`` / ``step-start``): the ``text-delta`` texts and the ``tool-call`` ids; chunks of an
  attempt declared dead by ``attempt-discarded {step, attempt}`` (whenever the marker arrives) are
  left out, duplicates ``(runId, seq)`` too;
* a run whose ``finish`` says ``stepResult.reason`` ``error`` or ``tripwire`` keeps no assistant
  message (its partial reply was never stored); a run with no ``finish`` yet is still streaming and
  keeps what it has streamed so far.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

UNSTORED_ENDINGS = frozenset({"error", "tripwire"})
"""``finish`` reasons whose run stores no assistant message."""


def _text_of(contents: Any) -> str:
    if isinstance(contents, str):
        return contents
    if isinstance(contents, list):
        return "".join(p.get("text", "") for p in contents if isinstance(p, dict) and p.get("type") == "text")
    return ""


def replay_transcript(chunks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript of ``chunks`` (in topic order) by the replay rule of this module.

    Returns ``[{id, role: "user" | "assistant", text, toolCallIds}]`` in first-seen order.
    """
    chunks = list(chunks)
    dead: dict[tuple[str, int], int] = {}
    for c in chunks:
        if c.get("type") == "attempt-discarded":
            p = c.get("payload") or {}
            key = (str(c.get("runId")), int(p.get("step", -1)))
            dead[key] = max(dead.get(key, -1), int(p.get("attempt", -1)))
    endings = {c.get("runId"): ((c.get("payload") or {}).get("stepResult") or {}).get("reason")
               for c in chunks if c.get("type") == "finish"}
    out: dict[str, dict[str, Any]] = {}
    current: dict[str, str] = {}  # run id → the assistant message id it streams under
    seen: set[tuple[str, int]] = set()
    for c in chunks:
        run_id, kind = str(c.get("runId")), c.get("type")
        seq = c.get("seq")
        if isinstance(seq, int):
            if (run_id, seq) in seen:
                continue
            seen.add((run_id, seq))
        if isinstance(c.get("attempt"), int) and c["attempt"] <= dead.get((run_id, c.get("step", -1)), -1):
            continue
        if kind == "data-user-message":
            data = c.get("data") or {}
            out.setdefault(str(data.get("id")), {"id": str(data.get("id")), "role": "user",
                                                  "text": _text_of(data.get("contents")), "toolCallIds": []})
            continue
        if endings.get(run_id) in UNSTORED_ENDINGS:
            continue
        payload = c.get("payload") or {}
        if kind in ("start", "step-start") and payload.get("messageId"):
            current[run_id] = str(payload["messageId"])
        if kind not in ("text-delta", "tool-call") or run_id not in current:
            continue
        msg = out.setdefault(current[run_id], {"id": current[run_id], "role": "assistant", "text": "",
                                               "toolCallIds": []})
        if kind == "text-delta":
            msg["text"] += payload.get("text", "")
        else:
            msg["toolCallIds"].append(payload.get("toolCallId"))
    return list(out.values())


def stored_transcript(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same view of stored messages (``{id, role, content: {parts}}``, e.g. ``threadline thread``
    lines), for comparing with :func:`replay_transcript`; roles other than user/assistant are left out."""
    out = []
    for m in messages:
        if m["role"] not in ("user", "assistant"):
            continue
        parts = (m.get("content") or {}).get("parts") or []
        out.append({"id": m["id"], "role": m["role"],
                    "text": "".join(p.get("text", "") for p in parts if p.get("type") == "text"),
                    "toolCallIds": [p["toolInvocation"]["toolCallId"] for p in parts
                                    if p.get("type") == "tool-invocation"] if m["role"] == "assistant" else []})
    return out
