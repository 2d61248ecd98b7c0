"""The fake model server's *pairing validator*: a request whose history breaks tool-call pairing is
refused, as a real provider refuses it, and counted, so a test that caused it fails.

The rule (OpenAI chat completions; :func:`openai_pairing_error`): an assistant message with
``tool_calls`` must be followed, directly, by one ``tool`` message for each of its call ids; a ``tool``
message must answer a call of the assistant message just before its block of tool messages, and only
once. Anthropic's Messages API (:func:`anthropic_pairing_error`) says the same with blocks: every
``tool_use`` block of an assistant message is answered by a ``tool_result`` block in the next (user)
message, and every ``tool_result`` answers a ``tool_use`` of the assistant message just before it.

The server answers such a request HTTP 400 with :data:`PAIRING_MESSAGE` (the provider's wording)
and counts it; ``GET /_fake/pairing`` reads ``{"count": n, "violations": [...]}``, ``POST
/_fake/pairing`` reads it and sets the count back to 0 (``POST /_fake/reset`` leaves it alone, so a
test that resets its scripts mid-way does not hide a violation).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from threadline.testing.model_script import PairingReport, Violation

if TYPE_CHECKING:
    from threadline.events.json_types import JSONObject

PAIRING_MESSAGE = ("An assistant message with 'tool_calls' must be followed by tool messages responding to "
                   "each 'tool_call_id'")
"""The provider's wording for a broken pairing (the start of OpenAI's 400 message)."""


def _call_ids(message: Mapping[str, object]) -> list[str]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [str(c.get("id")) for c in calls if isinstance(c, dict)]


def openai_pairing_error(messages: object) -> str | None:
    """Why an OpenAI ``messages`` list breaks tool-call pairing, or ``None`` when it does not.

    ``messages``: the request's ``messages`` (anything else, or non-dict items, are ignored).
    Returns a sentence starting with :data:`PAIRING_MESSAGE` that names the ids and message indexes.
    """
    if not isinstance(messages, list):
        return None
    pending: list[str] = []  # calls of the open assistant message not answered yet
    answerable: set[str] = set()  # calls of the open assistant message (answered or not)
    answered: set[str] = set()
    opened_at = -1
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "tool":
            call_id = str(message.get("tool_call_id"))
            if call_id not in answerable or call_id in answered:
                why = "answers no call of the assistant message before it" if call_id not in answered \
                    else "answers a call that was already answered"
                return f"{PAIRING_MESSAGE}: messages[{index}] (tool, id {call_id!r}) {why}."
            answered.add(call_id)
            pending.remove(call_id)
            continue
        if pending:
            return (f"{PAIRING_MESSAGE}. The following tool_call_ids did not have response messages: "
                    f"{', '.join(pending)} (assistant messages[{opened_at}], next non-tool messages[{index}]).")
        ids = _call_ids(message) if role == "assistant" else []
        pending, answerable, answered, opened_at = list(ids), set(ids), set(), index
    if pending:
        return (f"{PAIRING_MESSAGE}. The following tool_call_ids did not have response messages: "
                f"{', '.join(pending)} (assistant messages[{opened_at}] ends the request).")
    return None


def _blocks(message: Mapping[str, object], kind: str) -> list[dict[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def anthropic_pairing_error(messages: object) -> str | None:
    """Why an Anthropic ``messages`` list breaks ``tool_use`` / ``tool_result`` pairing, or ``None``.

    Returns a sentence starting with :data:`PAIRING_MESSAGE` that names the ids and message indexes.
    """
    if not isinstance(messages, list):
        return None
    previous_uses: list[str] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        results = [str(b.get("tool_use_id")) for b in _blocks(message, "tool_result")]
        if missing := [i for i in previous_uses if i not in results]:
            return (f"{PAIRING_MESSAGE}: tool_use ids were found without tool_result blocks immediately after: "
                    f"{', '.join(missing)} (messages[{index}]).")
        extra = [r for r in results if r not in previous_uses or results.count(r) > 1]
        if extra:
            return (f"{PAIRING_MESSAGE}: unexpected tool_use_id found in tool_result blocks: "
                    f"{', '.join(sorted(set(extra)))} (messages[{index}]).")
        previous_uses = [str(b.get("id")) for b in _blocks(message, "tool_use")] \
            if message.get("role") == "assistant" else []
    if previous_uses:
        return (f"{PAIRING_MESSAGE}: tool_use ids were found without tool_result blocks immediately after: "
                f"{', '.join(previous_uses)} (the last message).")
    return None


def refuse(request: Request, body: JSONObject, model: str | None, reason: str) -> None:
    """Count a refused request and journal it (``scripted: false``, ``pairing_error: reason``); the
    dialect then answers 400 in its own error shape."""
    request.app.state.pairing.record(request.url.path, model, reason)
    request.app.state.store.journal.append({
        "model": model, "path": request.url.path, "stream": bool(body.get("stream")), "scripted": False,
        "pairing_error": reason, "headers": {}, "body": body, "time": time.time()})


class PairingLog:
    """The count of refused requests since the last reset, and the last few reasons (newest last)."""

    def __init__(self, keep: int = 50) -> None:
        self.count = 0
        self.violations: deque[Violation] = deque(maxlen=keep)

    def record(self, path: str, model: str | None, reason: str) -> None:
        self.count += 1
        self.violations.append({"path": path, "model": model, "reason": reason})

    def snapshot(self) -> PairingReport:
        return {"count": self.count, "violations": list(self.violations)}


async def pairing_endpoint(request: Request) -> Response:
    """``GET /_fake/pairing``: ``{"count": n, "violations": [{path, model, reason}]}``; ``POST``: the
    same, then the count and the list are cleared."""
    log: PairingLog = request.app.state.pairing
    out = log.snapshot()
    if request.method == "POST":
        log.count = 0
        log.violations.clear()
    return JSONResponse(out)
