"""Rebuild a thread's transcript from its chunks (a live stream, or a replay from offset 0) by the
documented replay rule (docs/decisions.md, "The replay rule"), so that it equals the stored thread:

* a user message is a ``data-user-message`` echo: id ``data.id`` (the stored message's id and the
  ``accepted`` reply's ``signal_id``), text the text of ``data.contents``;
* an assistant message is what a run's *kept* attempts streamed under one ``messageId`` (from
  ``start`` / ``step-start``): the ``text-delta`` texts and the ``tool-call`` ids; chunks of an
  attempt declared dead by ``attempt-discarded {step, attempt}`` (whenever the marker arrives) are
  left out, duplicates ``(runId, seq)`` too;
* a run whose ``finish`` says ``stepResult.reason`` ``tripwire`` keeps no assistant message (its
  partial reply was never stored), unless ``process_output_step`` rejected its answer (a
  ``step-finish`` with reason ``tripwire``: the rejected answer is stored, as Mastra's); a run whose
  ``finish`` says ``error`` keeps its message, what it streamed before the failure, even when that
  is nothing (the stored message holds the ``error`` part); a run with no ``finish`` yet is still
  streaming and keeps what it has streamed so far.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypedDict

from threadline.events.chunk_types import ChunkBody, ChunkKind, JsonValue, known
from threadline.events.messages import is_user_authored

UNSTORED_ENDINGS = frozenset({"tripwire"})
"""``finish`` reasons whose run stores no assistant message (but a rejected step's, see above)."""


class TranscriptEntry(TypedDict):
    """One message of a transcript, as :func:`replay_transcript` and :func:`stored_transcript` give it."""

    id: str
    role: Literal["user", "assistant"]
    text: str
    toolCallIds: list[str | None]


def _text_of(contents: JsonValue) -> str:
    if isinstance(contents, str):
        return contents
    if isinstance(contents, list):
        return "".join(str(p.get("text", "")) for p in contents if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _dead_attempts(chunks: list[ChunkBody]) -> dict[tuple[str, int], int]:
    """``(runId, step) -> the highest attempt declared dead`` by the ``attempt-discarded`` chunks."""
    dead: dict[tuple[str, int], int] = {}
    for c in chunks:
        k = known(c)
        if k is not None and k["type"] == ChunkKind.ATTEMPT_DISCARDED:
            p = k.get("payload") or {}
            key = (str(k.get("runId")), int(p.get("step", -1)))
            dead[key] = max(dead.get(key, -1), int(p.get("attempt", -1)))
    return dead


def _endings(chunks: list[ChunkBody]) -> dict[str, str | None]:
    """``runId -> its finish's stepResult.reason`` (``tripwire`` when the finish carries one: after
    an abort in ``process_output_result`` the reason is the accepted step's, as Mastra's);
    ``stored-tripwire`` for a run a tripwire ended after ``process_output_step`` rejected its step
    (a ``step-finish`` with reason ``tripwire``)."""
    ends: dict[str, str | None] = {}
    rejected: set[str] = set()
    for k in map(known, chunks):
        if k is None or k["type"] not in (ChunkKind.FINISH, ChunkKind.STEP_FINISH):
            continue
        payload = k.get("payload") or {}
        reason = (payload.get("stepResult") or {}).get("reason")
        if k["type"] == ChunkKind.FINISH:
            ends[str(k.get("runId"))] = "tripwire" if payload.get("tripwire") else reason
        elif reason == "tripwire":
            rejected.add(str(k.get("runId")))
    return {run: "stored-tripwire" if run in rejected and end == "tripwire" else end for run, end in ends.items()}


def replay_transcript(chunks: Iterable[ChunkBody]) -> list[TranscriptEntry]:
    """The transcript of ``chunks`` (in topic order) by the replay rule of this module.

    Returns ``[{id, role: "user" | "assistant", text, toolCallIds}]`` in first-seen order.
    """
    chunks = list(chunks)
    dead, endings = _dead_attempts(chunks), _endings(chunks)
    out: dict[str, TranscriptEntry] = {}
    current: dict[str, str] = {}  # run id → the assistant message id it streams under
    seen: set[tuple[str, int]] = set()
    for c in chunks:
        run_id = str(c.get("runId"))
        seq = c.get("seq")
        if isinstance(seq, int):
            if (run_id, seq) in seen:
                continue
            seen.add((run_id, seq))
        attempt = c.get("attempt")
        k = known(c)
        if k is None or (isinstance(attempt, int) and attempt <= dead.get((run_id, c.get("step", -1)), -1)):
            continue
        if k["type"] == ChunkKind.DATA_USER_MESSAGE:
            data = k.get("data") or {}
            out.setdefault(str(data.get("id")), {"id": str(data.get("id")), "role": "user",
                                                  "text": _text_of(data.get("contents")), "toolCallIds": []})
            continue
        if endings.get(run_id) in UNSTORED_ENDINGS:
            continue
        if k["type"] == ChunkKind.START or k["type"] == ChunkKind.STEP_START:
            message_id = (k.get("payload") or {}).get("messageId")
            if message_id:
                current[run_id] = str(message_id)
        if k["type"] not in (ChunkKind.TEXT_DELTA, ChunkKind.TOOL_CALL, ChunkKind.ERROR) or run_id not in current:
            continue
        msg = out.setdefault(current[run_id], {"id": current[run_id], "role": "assistant", "text": "",
                                               "toolCallIds": []})
        if k["type"] == ChunkKind.TEXT_DELTA:
            msg["text"] += (k.get("payload") or {}).get("text", "")
        elif k["type"] == ChunkKind.TOOL_CALL:
            msg["toolCallIds"].append((k.get("payload") or {}).get("toolCallId"))
    return list(out.values())


def stored_transcript(messages: Iterable[Mapping[str, Any]]) -> list[TranscriptEntry]:
    """The same view of stored messages (``{id, role, content: {parts}}``, e.g. ``threadline thread``
    lines), for comparing with :func:`replay_transcript`; a user signal (``sendMessage``) counts as
    the user's, other signals and roles are left out."""
    out: list[TranscriptEntry] = []
    for m in messages:
        user = is_user_authored(m)
        if not user and m["role"] != "assistant":
            continue
        parts = (m.get("content") or {}).get("parts") or []
        out.append({"id": m["id"], "role": "user" if user else "assistant",
                    "text": "".join(p.get("text", "") for p in parts if p.get("type") == "text"),
                    "toolCallIds": [p["toolInvocation"]["toolCallId"] for p in parts
                                    if p.get("type") == "tool-invocation"] if m["role"] == "assistant" else []})
    return out
